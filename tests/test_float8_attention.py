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
    check_gqa_attention_against_float64("cudnn-fp8", True, kv_heads, tolerance=(0.06, 0.12))
