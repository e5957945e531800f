"""trainperf's float8 MLP (`--float8 trainperf`): its cast kernels against PyTorch's casts, the
delayed scales, the MLP against float64, and the recipe plumbing. On the CPU the kernels run in
Triton's interpreter, whose float32 → float8 conversion rounds some values toward zero (it drops
the carry when a value rounds up to the next power of two, and truncates subnormals); the checks
there allow exactly that, and on the GPU the same tests check the casts bit for bit."""

import pytest
import torch
import torch.nn.functional as F
from conftest import rel_err
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.kernels import float8_mlp as f8
from trainperf.kernels.float8_mlp import Float8SwiGLUMLP, ScaleState
from trainperf.models import hf_llama

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def assert_float8_equal(y: torch.Tensor, ref: torch.Tensor) -> None:
    """y equals PyTorch's cast `ref` bit for bit; in the interpreter, also where y lies one step
    of float8 nearer zero, or at half of a power of two that ref holds (its dropped carry)."""
    differ = y.view(torch.uint8) != ref.view(torch.uint8)
    if DEVICE == "cpu":
        magnitude = ref.view(torch.uint8).int() & 0x7F
        nearer_zero = magnitude - (y.view(torch.uint8).int() & 0x7F) == 1
        exponent = torch.frexp(ref.float())[1]
        carry = (ref.float().abs() == 2.0 ** (exponent - 1)) & (y.float() * 2 == ref.float())
        differ &= ~((nearer_zero & (y.float() * ref.float() >= 0)) | carry)
    assert not differ.any(), f"{int(differ.sum())} of {y.numel()} casts differ"


def _cast_ref(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    fmax = f8.float8_max(dtype)
    return (x.float() * scale).clamp(-fmax, fmax).to(dtype)


@pytest.mark.parametrize("dtype", [f8.E4M3, f8.E5M2])
def test_a_cast_writes_the_tensor_and_its_transpose_and_records_its_amax(dtype):
    torch.manual_seed(0)
    state = ScaleState(torch.device(DEVICE))
    x = torch.randn(80, 112, device=DEVICE).bfloat16()  # edges that fill no whole tile
    y, yt = f8.cast_transposed(x, state, f8.DY, dtype)
    assert y.dtype == yt.dtype == dtype and y.shape == (80, 112) and yt.shape == (112, 80)
    assert torch.equal(yt.view(torch.uint8), y.view(torch.uint8).t())
    # the first cast calibrates: its scale maps its own amax to the float8 maximum
    amax = x.float().abs().max()
    torch.testing.assert_close(state.scale[f8.DY], f8.float8_max(dtype) / amax)
    assert_float8_equal(y, _cast_ref(x, state.scale[f8.DY], dtype))
    assert state.now[f8.DY] == amax  # recorded for the next scale


def test_the_swiglu_kernels_cast_what_the_reference_computes():
    torch.manual_seed(0)
    state = ScaleState(torch.device(DEVICE))
    t, f = 96, 80
    gu = torch.randn(t, 2 * f, device=DEVICE).bfloat16()
    dh = torch.randn(t, f, device=DEVICE).bfloat16()
    for role, dtype, kernel, ref in (
            (f8.H, f8.E4M3, f8._swiglu_kernel, f8.swiglu_reference(gu)),
            (f8.DGU, f8.E5M2, f8._swiglu_bwd_kernel, f8.swiglu_grad_reference(dh, gu))):
        state.next(role, dtype, ref)
        cols = ref.shape[1]
        y = torch.empty(t, cols, dtype=dtype, device=DEVICE)
        yt = torch.empty(cols, t, dtype=dtype, device=DEVICE)
        inputs = (gu,) if role == f8.H else (dh, gu)
        kernel[f8.tile_grid(t, f, f8.SWIGLU_TILE)](*inputs, y, yt, state.scale[role:], state.now[role:], t, f,
                                                   FMAX=f8.float8_max(dtype), BM=f8.SWIGLU_TILE[0],
                                                   BN=f8.SWIGLU_TILE[1])
        assert_float8_equal(y, _cast_ref(ref, state.scale[role], dtype))
        assert torch.equal(yt.view(torch.uint8), y.view(torch.uint8).t())
        torch.testing.assert_close(state.now[role], ref.abs().max(), rtol=1e-6, atol=0)


def test_a_scale_looks_back_over_the_history_and_saturates_beyond_it():
    state = ScaleState(torch.device(DEVICE))
    fmax = f8.float8_max(f8.E4M3)
    amaxes = [2.0, 8.0] + [1.0] * f8.HISTORY
    for i, amax in enumerate(amaxes):
        x = torch.full((16, 16), amax, device=DEVICE)
        y, _ = f8.cast_transposed(x, state, f8.X, f8.E4M3)
        seen = amaxes[max(0, i - f8.HISTORY):i] or [amax]  # the first cast calibrates
        torch.testing.assert_close(state.scale[f8.X].item(), fmax / max(seen))
        torch.testing.assert_close(state.inv[f8.X, 0].item(), max(seen) / fmax)
    # 8.0 has left the history: the scale is back to 1.0's, and a larger value saturates
    y, _ = f8.cast_transposed(torch.full((16, 16), 3.0, device=DEVICE), state, f8.X, f8.E4M3)
    assert (y.float() == fmax).all()


def test_a_scale_state_is_one_buffer_with_the_cublas_scales_aligned():
    """torch.compile clones each tensor that a backward operator updates, a kernel each, and views
    of one buffer once: the state's tensors are views of one buffer, a row per role, and each
    row of inverse scales starts on 16 bytes, as cuBLAS reads it."""
    state = ScaleState(torch.device(DEVICE), roles=3)
    tensors = [state.hist, state.now, state.scale, state.inv]
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1
    assert all(state.inv[role].data_ptr() % 16 == 0 for role in range(3))
    assert (state.scale == 1).all() and (state.inv == 1).all() and not state.hist.any()
    f8.cast_transposed(torch.full((16, 16), 4.0, device=DEVICE), state, 1, f8.E4M3)
    assert state.now[1] == 4.0 and state.scale[1] == f8.float8_max(f8.E4M3) / 4
    assert state.now[[0, 2]].eq(0).all() and state.scale[[0, 2]].eq(1).all() and state.inv[[0, 2]].eq(1).all()


def _mlp(dtype=torch.float64):
    torch.manual_seed(0)
    model = hf_llama.build_model(hf_llama.load_config("tiny"), dtype, torch.device(DEVICE))
    return model.model.layers[0].mlp


def _check_against_float64(tokens: int, bounds: tuple[float, float, float]) -> None:
    ref = _mlp()
    fp8 = Float8SwiGLUMLP(_mlp(torch.bfloat16))
    x = torch.randn(tokens, ref.gate_proj.in_features, device=DEVICE, dtype=torch.float64)
    dy = torch.randn(tokens, ref.down_proj.out_features, device=DEVICE, dtype=torch.float64)
    x64 = x.clone().requires_grad_()
    ref(x64).backward(dy)
    for _ in range(3):  # calibrating, then with the scales of earlier iterations
        xb = x.bfloat16().requires_grad_()
        y = fp8(xb)
        y.backward(dy.bfloat16())
        assert y.dtype == torch.bfloat16 and rel_err(y, ref(x)) < bounds[0]
        assert rel_err(xb.grad, x64.grad) < bounds[1]
        stacked = torch.cat([ref.gate_proj.weight.grad, ref.up_proj.weight.grad])
        assert rel_err(fp8.gate_up.weight.grad, stacked) < bounds[2]
        assert rel_err(fp8.down_proj.weight.grad, ref.down_proj.weight.grad) < bounds[2]
        fp8.zero_grad()
    assert all(fp8.state.calibrated)


@pytest.mark.skipif(DEVICE == "cuda", reason="the GPU form of this test is below")
def test_the_float8_mlp_follows_float64_within_the_interpreter_s_float8():
    _check_against_float64(128, (0.25, 0.3, 0.3))


@pytest.mark.gpu
def test_the_float8_mlp_follows_float64_within_float8_on_the_gpu():
    # e4m3 holds 3 bits of mantissa, e5m2 (gradients) 2: a few percent per GEMM
    _check_against_float64(4096, (0.08, 0.12, 0.12))


def test_the_float8_mlp_takes_token_counts_float8_gemms_take():
    fp8 = Float8SwiGLUMLP(_mlp(torch.bfloat16))
    with pytest.raises(ValueError, match="multiple of 16, not 20"):
        fp8(torch.randn(4, 5, 64, device=DEVICE).bfloat16())


def test_a_cast_refuses_dims_its_word_wide_transpose_cannot_write():
    state = ScaleState(torch.device(DEVICE))
    with pytest.raises(ValueError, match=r"multiples of 4, not \[16, 18\]"):
        f8.cast_transposed(torch.ones(16, 18, device=DEVICE), state, f8.X, f8.E4M3)


def test_the_float8_mlp_keeps_the_model_s_weights():
    mlp = _mlp(torch.bfloat16)
    fp8 = Float8SwiGLUMLP(mlp)
    assert torch.equal(fp8.gate_up.weight, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
    assert fp8.down_proj is mlp.down_proj
    x = torch.randn(32, 64, dtype=torch.float64, device=DEVICE)
    gate, up = fp8.gate_up.weight.double().chunk(2)
    ref = F.linear(F.silu(x @ gate.t()) * (x @ up.t()), mlp.down_proj.weight.double())
    assert rel_err(fp8(x.bfloat16()).cpu(), ref.cpu()) < 0.25


def test_the_float8_mlp_leaves_swiglu_to_itself(db):
    res = CliRunner().invoke(app, ["llama", "--device", "cpu", "--quiet", "--float8", "trainperf",
                                   "--swiglu", "triton", "--batch-seq", "1x32", "--db", str(db)])
    assert res.exit_code == 2 and "--float8 trainperf computes SwiGLU in its own float8 MLP" in res.output


@pytest.mark.parametrize("fast_backward", [True, False])
def test_the_backward_products_accumulate_as_fast_backward_says_and_the_forward_ones_fast(
        monkeypatch, fast_backward):
    from trainperf.kernels.float8_linear import float8_linear, linear_state

    seen: list[bool] = []
    product = f8.float8_product
    monkeypatch.setattr(f8, "float8_product", lambda *a: seen.append(a[5]) or product(*a))
    monkeypatch.setattr(f8, "FAST_BACKWARD", fast_backward)
    monkeypatch.setattr(f8, "GATE_UP_IN_FLOAT8", False)  # the float8 gate/up product is always fast
    mlp = Float8SwiGLUMLP(_mlp(torch.bfloat16))
    x = torch.randn(32, 64, device=DEVICE).bfloat16().requires_grad_()
    y = mlp(x)
    w = torch.randn(48, 64, device=DEVICE).bfloat16().requires_grad_()
    z = float8_linear(x, w, linear_state(w))
    assert seen == [True] * 3
    monkeypatch.setattr(f8, "FAST_BACKWARD", not fast_backward)  # the forward's setting holds
    (y.sum() + z.sum()).backward()
    assert seen == [True] * 3 + [fast_backward] * 6


def _float8_operands(m: int, n: int, k: int, state: ScaleState) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    a, _ = f8.cast_transposed(torch.randn(m, k, device=DEVICE).bfloat16(), state, f8.X, f8.E4M3)
    b, _ = f8.cast_transposed(torch.randn(n, k, device=DEVICE).bfloat16(), state, f8.W_GU, f8.E4M3)
    return a, b


@pytest.mark.parametrize("room", [1.0, 0.25])
def test_the_gate_up_product_is_quantized_at_its_scale_and_saturates(room):
    # room 0.25: the scale leaves room for a quarter of the product's amax, so most values saturate
    state = ScaleState(torch.device(DEVICE))
    a, b = _float8_operands(64, 96, 128, state)
    product = f8.float8_product(a, b, state.inv, f8.X, f8.W_GU, out_dtype=torch.float32)
    state.next(f8.GU, f8.E4M3, product * room)
    gu8 = f8.float8_product_as_float8(a, b, state.inv, f8.X, f8.W_GU, f8.GU)
    fmax = f8.float8_max(f8.E4M3)
    scaled = product * state.scale[f8.GU]
    assert gu8.dtype == f8.E4M3 and not gu8.float().isnan().any()
    saturated = scaled.abs() >= fmax * 1.07  # beyond rounding's reach of the maximum
    assert (gu8.float()[saturated].abs() == fmax).all() and saturated.any() == (room < 1)
    inside = ~saturated
    # within one e4m3 step (2**-3 of a value) of the scaled product, the accumulations aside
    err = (gu8.float() - scaled.clamp(-fmax, fmax)).abs()[inside]
    assert (err <= scaled.abs()[inside] / 8 + 2**-6).all()


def test_the_swiglu_kernel_takes_a_float8_gate_up_and_records_its_amax_saturation_aware():
    torch.manual_seed(0)
    state = ScaleState(torch.device(DEVICE))
    t, f = 96, 80
    gu = 3 * torch.randn(t, 2 * f, device=DEVICE)
    state.next(f8.GU, f8.E4M3, gu / 2)  # half the room: the largest values saturate
    fmax = f8.float8_max(f8.E4M3)
    gu8 = (gu * state.scale[f8.GU]).clamp(-fmax, fmax).to(f8.E4M3)
    values = f8.gate_up_values(gu8, state.inv)
    torch.testing.assert_close(values, gu8.float() / state.scale[f8.GU])
    h8, h8t = f8._swiglu_op(gu8, *state.tensors())
    ref = f8.swiglu_reference(values)
    assert_float8_equal(h8, _cast_ref(ref, state.scale[f8.H], f8.E4M3))
    assert torch.equal(h8t.view(torch.uint8), h8.view(torch.uint8).t())
    # saturated values count twice their float8 value: the next scale grows past them
    torch.testing.assert_close(state.now[f8.GU], 2 * fmax * state.inv[f8.GU, 0], rtol=1e-6, atol=0)
    dh = torch.randn(t, f, device=DEVICE).bfloat16()
    dgu8, _ = f8._swiglu_bwd_op(dh, gu8, *state.tensors())
    grad_ref = f8.swiglu_grad_reference(dh, values)
    assert_float8_equal(dgu8, _cast_ref(grad_ref, state.scale[f8.DGU], f8.E5M2))


def test_the_mlp_keeps_the_gate_up_product_in_float8_where_gate_up_in_float8_says(monkeypatch):
    for in_float8 in (True, False):
        monkeypatch.setattr(f8, "GATE_UP_IN_FLOAT8", in_float8)
        mlp = Float8SwiGLUMLP(_mlp(torch.bfloat16))
        x = torch.randn(32, 64, device=DEVICE).bfloat16().requires_grad_()
        y = mlp(x)
        saved = {t.dtype for t in y.grad_fn.saved_tensors}
        assert (f8.E4M3 in saved and torch.bfloat16 not in saved) == in_float8
        assert bool(mlp.state.calibrated[f8.GU]) == in_float8
        gu = x.detach().float() @ mlp.gate_up.weight.float().t()
        if in_float8:  # its amax is recorded for the next scale, within float8's rounding
            torch.testing.assert_close(mlp.state.now[f8.GU], gu.abs().max(), rtol=0.15, atol=0)
