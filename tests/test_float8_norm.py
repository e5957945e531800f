"""The norms and residual adds of a decoder layer with trainperf's float8 MLP in trainperf's own
kernels (kernels/float8_norm.py, kernels/rmsnorm.py): the fused add, norm and cast against
PyTorch's, the norm's backward with the residual's gradient against float64, and the layer against
the same layer with transformers' norms. On the CPU the kernels run in Triton's interpreter, in
float16 where the GPU takes bf16 (the interpreter rounds bf16 wrong)."""

import pytest
import torch
from conftest import rel_err
from test_float8_linear import BOUNDS, _layer
from test_float8_mlp import _cast_ref

from trainperf.kernels import float8_linear, float8_norm
from trainperf.kernels import float8_mlp as f8
from trainperf.kernels.float8_mlp import ScaleState
from trainperf.kernels.rmsnorm import rmsnorm_backward_op, rmsnorm_with_skip
from trainperf.models import hf_llama

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HALF = torch.bfloat16 if DEVICE == "cuda" else torch.float16
EPS = 1e-5


def test_the_norm_backward_adds_the_residual_gradient_as_float64_does():
    torch.manual_seed(0)
    x = torch.randn(48, 96, dtype=torch.float64, device=DEVICE)
    w = 1 + 0.1 * torch.randn(96, dtype=torch.float64, device=DEVICE)
    dy, skip = torch.randn_like(x), torch.randn_like(x)
    x64, w64 = x.clone().requires_grad_(), w.clone().requires_grad_()
    normed = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * w64
    torch.autograd.backward([normed, x64], [dy, skip])
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
    dx, dw = rmsnorm_backward_op(dy.float(), x.float(), w.float(), rstd, skip.float())
    assert rel_err(dx, x64.grad) < 1e-5 and rel_err(dw, w64.grad) < 1e-5
    without, _ = rmsnorm_backward_op(dy.float(), x.float(), w.float(), rstd)
    torch.testing.assert_close(dx - without, skip.float(), rtol=1e-5, atol=1e-5)


def test_the_norm_with_skip_passes_x_on_and_sums_both_gradients():
    torch.manual_seed(0)
    x = torch.randn(2, 16, 64, device=DEVICE, requires_grad=True)
    w = torch.randn(64, device=DEVICE, requires_grad=True)
    normed, carried = rmsnorm_with_skip(x, w, EPS)
    assert torch.equal(carried, x)
    (normed.square().sum() + (3 * carried).sum()).backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = x2 * torch.rsqrt(x2.pow(2).mean(-1, keepdim=True) + EPS) * w2
    (ref.square().sum() + (3 * x2).sum()).backward()
    assert rel_err(x.grad, x2.grad) < 1e-5 and rel_err(w.grad, w2.grad) < 1e-5


@pytest.mark.parametrize("add", [True, False])
def test_the_fused_cast_writes_the_sum_and_the_normed_float8_with_its_transpose(add):
    """add_norm_cast, and norm_cast (add false), which normalizes x itself."""
    torch.manual_seed(0)
    state = ScaleState(torch.device(DEVICE))
    m, n = 80, 272  # rows that fill no whole program, columns no whole chunk
    x, b = (torch.randn(m, n, device=DEVICE).to(HALF) for _ in range(2))
    w = (1 + 0.1 * torch.randn(n, device=DEVICE)).to(HALF)
    if add:
        s, y, yt, rstd = float8_norm.add_norm_cast(x, b, w, EPS, state, f8.X)
        assert torch.equal(s, x + b)
    else:
        s = x.clone()
        y, yt, rstd = float8_norm.norm_cast(x, w, EPS, state, f8.X)
        assert torch.equal(x, s)
    torch.testing.assert_close(rstd, torch.rsqrt(s.float().pow(2).mean(-1) + EPS), rtol=1e-5, atol=0)
    ref = float8_norm.rms_norm_reference(s, w, EPS)
    # the first cast calibrates from the normed sum's own amax
    torch.testing.assert_close(state.scale[f8.X], f8.float8_max(f8.E4M3) / ref.float().abs().max())
    assert state.now[f8.X] == ref.float().abs().max()
    want = _cast_ref(ref, state.scale[f8.X], f8.E4M3)
    steps = (y.view(torch.uint8).int() - want.view(torch.uint8).int()).abs()
    # the sum of squares in another order moves a rare value across a rounding point, and the
    # interpreter's float8 conversion rounds some toward zero: one step at most, but where the
    # interpreter drops the carry into the next power of two (tests/test_float8_mlp.py)
    carry = (y.float() * 2 == want.float()) if DEVICE == "cpu" else torch.zeros_like(steps, dtype=torch.bool)
    assert steps[~carry].max() <= 1 and (steps != 0).float().mean() < (0.1 if DEVICE == "cpu" else 0.02)
    assert torch.equal(yt.view(torch.uint8), y.view(torch.uint8).t())


def _train(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("attention", [False, True])
def test_a_layer_with_fused_norms_follows_float64_as_with_transformers_norms(attention, monkeypatch):
    """Every parameter, the norms' weights too, takes its gradient within float8's error of the
    float64 layer's, and within 1.5x the error of the same float8 layer with transformers' norms."""
    calls = []
    for module, name in ((float8_norm, "add_norm_cast"), (float8_linear, "norm_cast")):
        fused = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, fused=fused, name=name: calls.append(name) or fused(*a))
    ref = _layer(torch.float64)
    models = []
    for norms in (False, True):
        model = _layer(HALF)
        hf_llama.float8_layers(model, attention=attention)
        model.model.layers[0].float8_norms = norms
        models.append(model)
    ids = torch.randint(0, ref.config.vocab_size, (2, 32), device=DEVICE)
    ref_loss, ref_grads = _train(ref, ids)
    want = {name.replace("gate_proj", "gate_up"): grad for name, grad in ref_grads.items()
            if "up_proj" not in name}
    for name, grad in want.items():
        if "gate_up" in name:  # the float8 MLP stacks gate's and up's weights
            want[name] = torch.cat([grad, ref_grads[name.replace("gate_up", "up_proj")]])
    for step in range(3):  # calibrating, then on the scales of earlier steps
        (_, grads), (loss, fused_grads) = (_train(m, ids) for m in models)
        # both norms fused where the attention's q, k and v product is float8 with RoPE inside
        per_step = ["norm_cast", "add_norm_cast"] if attention else ["add_norm_cast"]
        assert calls == per_step * (step + 1) and abs(loss.item() - ref_loss.item()) < 0.02
        for name, grad in want.items():
            err = rel_err(fused_grads[name], grad)
            assert err < BOUNDS[1] and err < 1.5 * rel_err(grads[name], grad) + 0.01, name


def test_only_llama_s_own_norms_are_fused():
    model = _layer(torch.bfloat16)
    model.model.layers[0].input_layernorm = torch.nn.RMSNorm(model.config.hidden_size)
    hf_llama.float8_layers(model, attention=False)
    assert not hasattr(model.model.layers[0], "float8_norms")
