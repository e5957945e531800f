"""FlashAttention-2 (PyTorch and Triton) and the registry against the float64 reference."""

import pytest
import torch
from conftest import rel_err

from trainperf.attention.reference import naive_attention
from trainperf.attention.registry import get_attention
from trainperf.core.errors import Unsupported

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # Triton kernels: the GPU, else the interpreter
TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def check_against_reference(fn, b, h, n, d, dtype, causal, device="cpu", key_growth=1.0):
    """Output and all three gradients of fn vs naive attention in float64 on fresh inputs; with
    `key_growth`, key rows are scaled from 1 up to that factor along the sequence."""
    q, k, v = (torch.randn(b, h, n, d, device=device, dtype=dtype) for _ in range(3))
    k = k * torch.linspace(1, key_growth, n, device=device, dtype=dtype)[:, None]
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = fn(q, k, v, causal=causal)
    assert out.dtype == dtype and out.shape == q.shape
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_in = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = naive_attention(*ref_in, causal=causal)
    ref_grads = torch.autograd.grad(ref, ref_in, dout.double())
    tol = TOL[dtype]
    assert rel_err(out, ref) < tol
    for name, g, r in zip("qkv", grads, ref_grads, strict=True):
        assert torch.isfinite(g).all(), f"d{name} has non-finite values"
        assert rel_err(g, r) < 4 * tol, f"d{name} error {rel_err(g, r):.2e}"


SHAPES = [(2, 3, 37, 16), (1, 2, 70, 40), (1, 2, 33, 64)]  # ragged lengths, non-power-of-2 dim


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_torch_fa2_matches_reference(shape, causal):
    from trainperf.attention.flash_torch import flash_attention_torch
    check_against_reference(lambda q, k, v, causal: flash_attention_torch(q, k, v, causal, tile=16),
                            *shape, torch.float32, causal)


@pytest.mark.parametrize("impl", ["triton-fa2", "triton-fa2-atomic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_triton_fa2_matches_reference(shape, causal, dtype, impl):
    pytest.importorskip("triton")
    check_against_reference(get_attention(impl), *shape, dtype, causal, DEVICE)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_fa2_scores_growing_along_the_keys(causal, dtype):
    """Scores that grow along the sequence by far more than 2^8 per key block: the forward's
    running maxima must move (and O and l be rescaled) on later blocks too, not only the first
    (in fp16, P against a stale maximum overflows; skipping small rescales was measured slower)."""
    pytest.importorskip("triton")
    check_against_reference(get_attention("triton-fa2"), 1, 2, 70, 32, dtype, causal, DEVICE, key_growth=12.0)


@pytest.mark.parametrize("causal", [True, False])
def test_triton_fa2_key_blocks_wider_than_query_blocks(causal, monkeypatch):
    """Forward and dQ tiles with BLOCK_N = 2·BLOCK_M (the autotuned lists have both kinds; the
    interpreter's default tile has BLOCK_M > BLOCK_N): the causal diagonal then lies inside a key
    block, whose keys past it are masked."""
    triton = pytest.importorskip("triton")
    from trainperf.attention import flash_triton
    from trainperf.kernels import tuning
    for kernel in (flash_triton._fwd_kernel, flash_triton._bwd_dq_kernel):
        monkeypatch.setattr(kernel, "configs", [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32})])
        monkeypatch.setattr(kernel, "cache", {})
    monkeypatch.setattr(tuning, "_CHOSEN", {})  # the configs chosen for earlier tests
    for n in (70, 48):  # a ragged end, and one on the 16-row tile
        check_against_reference(get_attention("triton-fa2"), 1, 2, n, 32, torch.float32, causal, DEVICE)


def test_triton_fa2_later_calls_launch_with_the_autotuners_choice(monkeypatch):
    """The autotuner runs on a shape's first call only; later calls launch the kernels straight
    with its choice and give the same output and gradients."""
    pytest.importorskip("triton")
    from trainperf.attention import flash_triton
    from trainperf.kernels import tuning
    monkeypatch.setattr(tuning, "_CHOSEN", {})
    dispatched = []
    for kernel in (flash_triton._fwd_kernel, flash_triton._bwd_dkdv_kernel, flash_triton._bwd_dq_kernel):
        counted = lambda *a, _run=kernel.run, **kw: dispatched.append(1) or _run(*a, **kw)  # noqa: E731
        monkeypatch.setattr(kernel, "run", counted)
    q, k, v = (torch.randn(1, 2, 37, 16, device=DEVICE, requires_grad=True) for _ in range(3))
    calls = []
    for _ in range(2):
        out = flash_triton.flash_attention_triton(q, k, v)
        calls.append((out, *torch.autograd.grad(out.sum(), (q, k, v))))
        assert len(dispatched) == 3
    for first, second in zip(*calls, strict=True):
        assert torch.equal(first, second)


@pytest.mark.parametrize("group", [2, 8])
def test_triton_fa2_head_groups_that_do_not_divide_the_heads(group, monkeypatch):
    """Five heads in causal groups of 2 (a last group of one) or 8 (one group wider than the
    heads): outputs and gradients of every head still match the reference."""
    pytest.importorskip("triton")
    from trainperf.attention import flash_triton
    monkeypatch.setattr(flash_triton, "HEAD_GROUP", group)
    check_against_reference(get_attention("triton-fa2"), 1, 5, 37, 16, torch.float32, True, DEVICE)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the real-size tests take this path")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape, causal", [((2, 2, 36, 32), True), ((1, 2, 68, 40), False)])
def test_triton_fa2_tma_loads_match_reference(shape, causal, dtype, monkeypatch):
    """The backward's Hopper path (the dK/dV kernel reads Q, dO, L, D and the dQ kernel K, V
    through tensor descriptors; the TMA unit fills rows past the end with zeros) under the
    interpreter, which emulates descriptors: lengths that are multiples of 4 (each head's L row
    must start on 16 bytes) but not of the tile, and a head dim narrower than its tile (40 in a
    64-wide descriptor box)."""
    pytest.importorskip("triton")
    from trainperf.attention import flash_triton
    monkeypatch.setattr(flash_triton, "_use_tma", lambda q: True)
    check_against_reference(get_attention("triton-fa2"), *shape, dtype, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["triton-fa2", "triton-fa2-atomic"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(2, 8, 1000, 64), (1, 4, 2048, 128), (2, 4, 4099, 32), (1, 4, 1000, 40)])
def test_triton_fa2_on_gpu_at_real_sizes(shape, causal, dtype, impl):
    check_against_reference(get_attention(impl), *shape, dtype, causal, "cuda")


@pytest.mark.parametrize("name", ["sdpa", "sdpa-math"])
def test_sdpa_agrees_with_naive(name):
    check_against_reference(get_attention(name, torch.device("cpu")), 2, 2, 29, 16, torch.float32, True)


def test_naive_float64_is_causal():
    q, k, v = (torch.randn(1, 1, 8, 4, dtype=torch.float64) for _ in range(3))
    v2 = v.clone()
    v2[..., 5:, :] += 1.0
    assert torch.equal(naive_attention(q, k, v)[..., :5, :], naive_attention(q, k, v2)[..., :5, :])


def test_gpu_backends_are_unsupported_on_cpu():
    with pytest.raises(Unsupported, match="needs a CUDA GPU"):
        get_attention("sdpa-flash", torch.device("cpu"))


def test_unknown_attention_name():
    with pytest.raises(ValueError, match="valid choices: naive"):
        get_attention("magic")


def test_flash_rejects_mismatched_shapes():
    from trainperf.attention.flash_torch import flash_attention_torch
    with pytest.raises(ValueError, match="one shape"):
        flash_attention_torch(torch.randn(1, 1, 4, 8), torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8))


def test_triton_fa2_ragged_edge_with_very_negative_scores():
    """Every score near −400: a key past the sequence end that slipped through unmasked would add
    2^(+577) to dQ's softmax (inf, then NaN). The edge mask must keep the gradients finite and
    close (1e-2: at |scores| ~ 400, fp32 rounding in exp2 and dP − D leaves ~1e-3 on the GPU)."""
    pytest.importorskip("triton")
    from trainperf.attention.flash_triton import flash_attention_triton
    n, d = 37, 16
    base = torch.ones(1, 1, n, d, device=DEVICE)
    q = (10 * base + 0.1 * torch.randn_like(base)).requires_grad_()
    k = (-10 * base + 0.1 * torch.randn_like(base)).requires_grad_()
    v = torch.randn_like(base).requires_grad_()
    out = flash_attention_triton(q, k, v, causal=False)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_in = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref_grads = torch.autograd.grad(naive_attention(*ref_in, causal=False), ref_in, dout.double())
    for name, g, r in zip("qkv", grads, ref_grads, strict=True):
        assert torch.isfinite(g).all(), f"d{name} has non-finite values"
        assert rel_err(g, r) < 1e-2, f"d{name} error {rel_err(g, r):.2e}"


def test_naive_compiled_stays_compiled_past_dynamos_default_recompile_limit(compiled_graphs):
    """Each shape compiles anew (dynamic=False). Past Dynamo's default limit of 8 recompiles the
    function ran eagerly without a word, so a sweep timed eager code as `naive-compiled`."""
    fn = get_attention("naive-compiled")
    before = compiled_graphs()
    for n in range(5, 15):  # ten shapes no other test uses (head dim 6)
        q, k, v = (torch.randn(1, 1, n, 6) for _ in range(3))
        with torch.no_grad():
            torch.testing.assert_close(fn(q, k, v), naive_attention(q, k, v))
    assert compiled_graphs() - before == 10
