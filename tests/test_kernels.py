"""Fused kernels against their PyTorch references (Triton interpreter on the CPU, bf16 on GPUs)."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import rel_err

from trainperf.core.errors import Unsupported
from trainperf.kernels.chunked_loss import chunked_lm_loss
from trainperf.models.lm import LMConfig, Rope, TransformerLM, lm_loss
from trainperf.models.norms import make_norm

pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])


def grads_vs_reference(fn, ref, inputs, dtype):
    """fn on `inputs` (in dtype) against ref in float64: output and every input's gradient."""
    xs = [x.to(DEVICE, dtype).requires_grad_() for x in inputs]
    out = fn(*xs)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, xs, dout)
    rs = [x.detach().double().requires_grad_() for x in xs]
    ref_out = ref(*rs)
    ref_grads = torch.autograd.grad(ref_out, rs, dout.double())
    assert out.dtype == dtype
    assert rel_err(out, ref_out) < TOL[dtype]
    for g, r in zip(grads, ref_grads, strict=True):
        assert rel_err(g, r) < 4 * TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 5, 48), (37, 100)])  # odd row count, non-power-of-2 width
def test_triton_rmsnorm(shape, dtype):
    from trainperf.kernels.rmsnorm import rmsnorm_reference, rmsnorm_triton
    x, w = torch.randn(shape), 1 + 0.1 * torch.randn(shape[-1])
    # the weight stays fp32 (autocast keeps master weights); grads_vs_reference casts all, so wrap
    grads_vs_reference(lambda x, w: rmsnorm_triton(x, w.float()), lambda x, w: rmsnorm_reference(x, w),
                       [x, w], dtype)


def test_triton_rmsnorm_sums_more_partials_than_a_program_takes(monkeypatch):
    """The weight's gradient from more per-program partials than one block of the summing kernel
    holds (rmsnorm.SUM_TILE), as on a GPU of 132 SMs."""
    from trainperf.kernels import rmsnorm
    monkeypatch.setattr(rmsnorm, "_sm_count", lambda device: 40)  # 160 programs
    x, w = torch.randn(300, 100), 1 + 0.1 * torch.randn(100)
    assert rmsnorm.SUM_TILE[0] < 4 * 40
    grads_vs_reference(lambda x, w: rmsnorm.rmsnorm_triton(x, w), rmsnorm.rmsnorm_reference, [x, w],
                       torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_rope(dtype):
    from trainperf.kernels.rope import rope_reference, rope_triton
    rope = Rope(head_dim=24, context_length=16, theta=10_000.0)
    cos, sin = rope.cos.to(DEVICE), rope.sin.to(DEVICE)
    x = torch.randn(2, 3, 11, 24)
    grads_vs_reference(lambda x: rope_triton(x, cos, sin),
                       lambda x: rope_reference(x, cos[:11].double(), sin[:11].double()), [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_swiglu(dtype):
    from trainperf.kernels.swiglu import swiglu_reference, swiglu_triton
    a, b = torch.randn(3, 1500), torch.randn(3, 1500)  # not a multiple of the block
    grads_vs_reference(swiglu_triton, swiglu_reference, [a, b], dtype)


@pytest.mark.parametrize("chunk", [7, 64])
def test_chunked_loss_equals_full_cross_entropy(chunk):
    hidden = torch.randn(2, 25, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(40, 16, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 40, (2, 25))
    loss = chunked_lm_loss(hidden, weight, targets, chunk=chunk)
    ref = F.cross_entropy((hidden @ weight.t()).reshape(-1, 40), targets.reshape(-1))
    torch.testing.assert_close(loss.double(), ref)
    g = torch.autograd.grad(2.5 * loss, (hidden, weight))
    r = torch.autograd.grad(2.5 * ref, (hidden, weight))
    for a, b in zip(g, r, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("fused", [False, True])
def test_chunked_loss_holds_one_logits_block_at_a_time(fused):
    """Each chunk's [rows, vocab] block is freed before the next chunk's logits are made: the
    loss's share of the step's memory peak is one block, not two."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    from trainperf.kernels.chunked_loss import loss_and_grads

    vocab = 300

    class LiveBlocks(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.blocks, self.most_alive = [], 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.new_empty.default and out.shape[-1] == vocab:  # a chunk's logits
                self.most_alive = max(self.most_alive, sum(ref() is not None for ref in self.blocks))
                self.blocks.append(weakref.ref(out))
            return out

    hidden, weight = torch.randn(40, 16, device=DEVICE), torch.randn(vocab, 16, device=DEVICE)
    targets = torch.randint(0, vocab, (40,), device=DEVICE)
    with LiveBlocks() as mode:
        loss_and_grads(hidden, weight, targets, 8, fused)
    assert len(mode.blocks) == 5
    assert mode.most_alive == 0  # no earlier block was alive when a new one was made


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("scale", [1.0, 0.5, 3.0])
def test_grad_scale_matches_multiplication(dtype, scale):
    from trainperf.kernels.grad_scale import BLOCK, scale_
    a = torch.randn(2 * BLOCK + 37, device=DEVICE).to(dtype)  # several blocks and a tail
    b = torch.randn(3, 5, device=DEVICE).to(dtype)
    want = [(t.float() * scale).to(dtype) for t in (a, b)]
    scale_([a, b], torch.tensor(scale, device=DEVICE))
    for got, w in zip((a, b), want, strict=True):
        assert torch.equal(got, w)


def test_grad_scale_refuses_a_strided_tensor():
    from trainperf.kernels.grad_scale import scale_
    with pytest.raises(ValueError, match="contiguous"):
        scale_([torch.randn(4, 6, device=DEVICE).t()], torch.tensor(2.0, device=DEVICE))


def test_chunk_rows_bound_the_logits_block():
    from trainperf.kernels.chunked_loss import LOGITS_BLOCK_BYTES, MAX_CHUNK, chunk_rows
    assert chunk_rows(128256, torch.bfloat16) == 8192  # Llama 3's vocabulary: 8192 x 128256 x 2 B
    assert chunk_rows(128256, torch.float32) == 4096
    assert chunk_rows(100, torch.bfloat16) == MAX_CHUNK
    assert chunk_rows(10**9, torch.float32) == 128
    for vocab, dtype in ((128256, torch.bfloat16), (50257, torch.float32), (32000, torch.float16)):
        rows = chunk_rows(vocab, dtype)
        block = rows * vocab * torch.empty((), dtype=dtype).element_size()
        assert block <= LOGITS_BLOCK_BYTES < 2 * block or rows == MAX_CHUNK


@pytest.mark.parametrize("fused", [False, True])  # the foreach pass, and the Triton kernel (as on a GPU)
def test_chunked_loss_backward_twice_through_one_forward_fails_loudly(fused):
    """The stored gradients are scaled in place: a second backward must not scale them again."""
    dtype = torch.float32 if fused else torch.float64
    hidden = torch.randn(30, 8, dtype=dtype, device=DEVICE, requires_grad=True)
    weight = torch.randn(20, 8, dtype=dtype, device=DEVICE, requires_grad=True)
    loss = chunked_lm_loss(hidden, weight, torch.randint(0, 20, (30,), device=DEVICE), chunk=7, fused=fused)
    torch.autograd.grad(2 * loss, (hidden, weight), retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(2 * loss, (hidden, weight))


def test_chunked_loss_compiles_with_its_out_of_place_backward():
    hidden = torch.randn(30, 8, requires_grad=True)
    weight = torch.randn(20, 8, requires_grad=True)
    targets = torch.randint(0, 20, (30,))
    compiled = torch.compile(lambda h, w: 3 * chunked_lm_loss(h, w, targets, chunk=7, fused=False),
                             backend="aot_eager", fullgraph=True)
    got = torch.autograd.grad(compiled(hidden, weight), (hidden, weight))
    want = torch.autograd.grad(3 * F.cross_entropy(hidden @ weight.t(), targets), (hidden, weight))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [1000, 5000])  # several blocks and a tail (512 wide in the interpreter)
def test_cross_entropy_kernel_matches_float64(vocab, dtype):
    from trainperf.kernels.cross_entropy import cross_entropy_grad_, cross_entropy_lse2
    logits = 3 * torch.randn(37, vocab, device=DEVICE)
    logits[::2, vocab - 7] += 12  # a max that only the last block meets: the running sums rescale
    logits = logits.to(dtype)
    targets = torch.randint(0, vocab, (37,), device=DEVICE)
    x = logits.double()
    ref_loss = torch.logsumexp(x, -1) - x.gather(1, targets[:, None]).squeeze(1)
    ref_grad = torch.softmax(x, -1)
    ref_grad[torch.arange(37), targets] -= 1.0
    before = logits.clone()
    loss, lse2 = cross_entropy_lse2(logits, targets)  # the logits left as they are, lse in log2 units
    assert torch.equal(logits, before) and loss.dtype == lse2.dtype == torch.float32
    assert rel_err(loss, ref_loss) < 1e-5
    assert rel_err(lse2, torch.logsumexp(x, -1) / math.log(2)) < 1e-6
    loss = cross_entropy_grad_(logits, targets, 0.5)
    assert loss.dtype == torch.float32
    assert rel_err(loss, ref_loss) < 1e-5
    assert rel_err(logits, 0.5 * ref_grad) < TOL[dtype]


@pytest.mark.parametrize("factor", [1.0, 3.0])  # 1: the backward's scaling pass is skipped on the device
def test_fused_chunked_loss_matches_float64(factor):
    hidden = torch.randn(2, 25, 16, device=DEVICE, requires_grad=True)
    weight = torch.randn(3000, 16, device=DEVICE, requires_grad=True)
    targets = torch.randint(0, 3000, (2, 25), device=DEVICE)
    loss = chunked_lm_loss(hidden, weight, targets, chunk=16, fused=True)
    h64, w64 = hidden.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    ref = F.cross_entropy((h64 @ w64.t()).reshape(-1, 3000), targets.reshape(-1))
    assert abs(loss.item() - ref.item()) < 1e-5 * abs(ref.item())
    for g, r in zip(torch.autograd.grad(factor * loss, (hidden, weight)),
                    torch.autograd.grad(factor * ref, (h64, w64)), strict=True):
        assert rel_err(g, r) < 1e-5


def test_fused_chunked_loss_sums_half_precision_rows_in_float32():
    # 1,024 losses near log(64) summed in fp16 would round at every chunk (0.1% and more here)
    hidden = torch.randn(1024, 8, device=DEVICE, dtype=torch.float16) * 0.1
    weight = torch.randn(64, 8, device=DEVICE, dtype=torch.float16)
    targets = torch.randint(0, 64, (1024,), device=DEVICE)
    loss = chunked_lm_loss(hidden, weight, targets, chunk=16, fused=True)
    ref = F.cross_entropy(hidden.double() @ weight.double().t(), targets)
    assert loss.dtype == torch.float32
    assert abs(loss.item() - ref.item()) < 2e-5 * ref.item()


def test_model_with_every_swap_matches_the_stock_model():
    cfg = LMConfig(vocab_size=50, context_length=16, d_model=32, d_ff=64, n_layers=2, n_heads=4)
    torch.manual_seed(0)
    stock = TransformerLM(cfg).to(DEVICE)
    fast = TransformerLM(LMConfig(**{**cfg.__dict__, "norm": "triton", "rope": "triton",
                                     "swiglu": "triton"})).to(DEVICE)
    fast.load_state_dict(stock.state_dict())
    tokens = torch.randint(0, 50, (2, 17), device=DEVICE)
    x, y = tokens[:, :-1], tokens[:, 1:]
    loss_a = lm_loss(stock(x), y)
    loss_b = chunked_lm_loss(fast.hidden(x), fast.lm_head.weight, y, chunk=10)
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-5)
    ga = torch.autograd.grad(loss_a, list(stock.parameters()))
    gb = torch.autograd.grad(loss_b, list(fast.parameters()))
    for (name, _), a, b in zip(stock.named_parameters(), ga, gb, strict=True):
        assert rel_err(b, a) < 1e-4, name


def test_triton_swaps_are_unsupported_on_a_cpu_without_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    norm = make_norm("triton", 8)
    with pytest.raises(Unsupported, match="needs a CUDA GPU"):
        norm(torch.randn(2, 8))
