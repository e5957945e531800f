"""Float8 attention's scales (attention/cudnn_fp8.py): the casts against float64, and the bounds
that scale O and dP before the kernel runs hold for the attention they bound."""

import pytest
import torch

from trainperf.attention import cudnn_fp8 as f8


@pytest.mark.parametrize("dtype", [f8.E4M3, f8.E5M2])
def test_a_cast_takes_its_amax_to_the_float8_top_binade_keeps_its_strides_and_rounds_once(dtype):
    torch.manual_seed(0)
    t = (torch.randn(2, 64, 4, 16) * torch.logspace(-3, 2, 16)).transpose(1, 2)  # [b, h, n, d] view
    t8, descale = f8.cast(t, dtype)
    assert t8.dtype == dtype and t8.stride() == t.stride() and descale.shape == (1, 1, 1, 1)
    assert torch.finfo(dtype).max / 2 < t8.float().abs().max().item() <= torch.finfo(dtype).max
    assert torch.log2(descale).item().is_integer()  # a power of two: exact to apply and to undo
    back, exact = t8.double() * descale.double(), t.double()
    mantissa = {f8.E4M3: 3, f8.E5M2: 2}[dtype]
    smallest = {f8.E4M3: 2.0**-9, f8.E5M2: 2.0**-16}[dtype] * descale.item()  # a subnormal step
    assert ((back - exact).abs() <= exact.abs() * 2.0 ** -(mantissa + 1) + smallest).all()


def test_bound_scales_take_a_float8_tensor_s_bound_into_its_top_binade_and_leave_others_unscaled():
    scale, descale = f8.bound_scales(torch.tensor(2.0), f8.E4M3)
    assert scale.item() == 128 and descale.item() == 1 / 128  # 2 x 128 = 256 <= 448 < 2 x 256
    assert f8.bound_scales(torch.tensor(3.5), f8.E4M3)[0].item() == 128  # 3.5 x 128 = 448 exactly
    assert f8.bound_scales(torch.tensor(2.0), torch.bfloat16)[0].item() == 1.0


def test_o_and_dp_never_pass_the_bounds_their_scales_come_from():
    """In float64, with grouped K/V heads and an outlier in V: |O| ≤ amax(V), |dP| ≤ the bound."""
    torch.manual_seed(1)
    b, h, kv, n, d = 2, 4, 2, 32, 16
    q, k, v, do = (torch.randn(b, heads, n, d, dtype=torch.float64) for heads in (h, kv, kv, h))
    v[0, 1, 5, 3] = 40.0
    k_full, v_full = (t.repeat_interleave(h // kv, dim=1) for t in (k, v))
    scores = (q @ k_full.transpose(-1, -2)) * d**-0.5
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    o = scores.softmax(-1) @ v_full
    dp = do @ v_full.transpose(-1, -2)
    assert o.abs().max() <= v.abs().amax()
    bound = f8.dp_bound(do, v)
    assert dp.abs().max() <= bound and dp.abs().max() > bound / 10  # holds, and not far too loose here


def test_the_amax_history_scales_by_its_largest_with_headroom_and_forgets_the_oldest():
    history = f8.AmaxHistory(torch.tensor([[1.0, 2.0, 3.0, 4.0]]).repeat(3, 1), margin=2.0)
    history.record(torch.tensor([8.0, 1.0, 1.0, 1.0]))
    assert history.delayed().tolist() == [16.0, 4.0, 6.0, 8.0]
    for _ in range(2):
        history.record(torch.tensor([0.5, 0.5, 0.5, 0.5]))
    assert history.delayed().tolist() == [16.0, 2.0, 2.0, 2.0]  # the first amaxes fell out
    history.record(torch.tensor([0.5, 0.5, 0.5, 0.5]))
    assert history.delayed().tolist() == [1.0, 1.0, 1.0, 1.0]


def test_delayed_scales_are_powers_of_two_that_fit_the_amaxes_and_ones_for_bf16():
    amaxes = torch.tensor([3e-5, 0.7, 448.0, 1.0])
    scales = f8.delayed_scales(amaxes, f8.E4M3)
    assert scales.shape == (3,) and torch.log2(scales).frac().eq(0).all()
    assert (amaxes[:3] * scales <= 448).all() and (amaxes[:3] * scales * 2 > 448).all()
    assert f8.delayed_scales(amaxes, torch.bfloat16).tolist() == [1.0, 1.0, 1.0]


def test_a_float8_output_goes_to_bf16_and_back_to_the_same_float8_exactly():
    """The ops hand O to the model in bf16 and cast it back in the backward with the same scale: a
    float8 value times a power of two is a bf16 value, so nothing is lost either way."""
    every_e4m3 = torch.arange(256, dtype=torch.uint8).view(f8.E4M3)
    every_e4m3 = every_e4m3[~every_e4m3.float().isnan()]
    descale = f8.bound_scales(torch.tensor(3e-3), f8.E4M3)[1]
    o = f8.exact_bf16(every_e4m3, descale).reshape(-1)
    assert o.dtype == torch.bfloat16 and torch.equal(o.double(), every_e4m3.double() * descale.item())
    v = torch.full((1, 1, 1, 1), 3e-3)  # V's amax: the bound O's scale comes from
    back, back_descale = f8.recast_output(o, v)
    assert back_descale.item() == descale.item()
    assert torch.equal(back.reshape(-1).view(torch.uint8), every_e4m3.view(torch.uint8))


def test_without_the_package_or_a_gpu_float8_attention_is_unsupported_naming_what_it_needs(monkeypatch):
    from trainperf.attention.registry import get_attention
    from trainperf.core.errors import Unsupported
    from trainperf.kernels import cudnn_graphs

    monkeypatch.setattr(cudnn_graphs, "cudnn_installed", lambda: False)
    with pytest.raises(Unsupported, match=r"trainperf\[cudnn\]"):
        get_attention("cudnn-fp8", torch.device("cpu"))
    monkeypatch.setattr(cudnn_graphs, "cudnn_installed", lambda: True)
    with pytest.raises(Unsupported, match="needs a CUDA GPU"):
        get_attention("cudnn-fp8", torch.device("cpu"))


def test_the_ops_take_bf16_and_give_bf16_with_fake_shapes_and_autograd():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 8, 32, 64, dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.empty(2, 2, 32, 64, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
        o, stats = f8.cudnn_fp8_sdpa_op(q, k, v, True, 0.125)
        assert o.shape == q.shape and o.dtype == torch.bfloat16 and stats.shape == (2, 8, 32, 1)
        o.sum().backward()
        assert [t.grad.shape for t in (q, k, v)] == [q.shape, k.shape, v.shape]


@pytest.mark.gpu
@pytest.mark.parametrize("kv_heads", [8, 2])
def test_float8_attention_follows_float64_within_float8_s_precision(kv_heads):
    from conftest import check_gqa_attention_against_float64

    from trainperf.kernels import cudnn_graphs

    if not cudnn_graphs.cudnn_installed() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs nvidia-cudnn-frontend and a Hopper or newer GPU")
    check_gqa_attention_against_float64("cudnn-fp8", True, kv_heads, tolerance=(0.06, 0.12), head_dim=128)


@pytest.mark.gpu
def test_cudnn_reports_the_amaxes_of_the_gradients_before_their_scales():
    """A delayed scale needs the amax of the gradient itself, not of its scaled float8 copy."""
    from trainperf.kernels import cudnn_graphs

    if not cudnn_graphs.cudnn_installed() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs nvidia-cudnn-frontend and a Hopper or newer GPU")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 512, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    do = torch.randn_like(q) * 1e-3
    o, stats, descale_o = f8.float8_forward(q, k, v, True, 128**-0.5)
    first = f8.float8_backward(do, q, k, v, o, descale_o, stats, True, 128**-0.5)[-1]
    *grads, descales, amaxes = f8.float8_backward(do, q, k, v, o, descale_o, stats, True, 128**-0.5,
                                                  delayed=first)
    assert (descales != 1).all()  # scaled this time
    for i, g in enumerate(grads):
        measured = (g.float() * descales[i]).abs().max()
        assert torch.isclose(amaxes[i], measured, rtol=1 / 8), (i, amaxes[i], measured)
