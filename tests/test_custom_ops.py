"""trainperf's Triton kernels as PyTorch custom ops: registration, fake shapes and autograd checked by
`torch.library.opcheck` (on the CPU through Triton's interpreter), and on the GPU each kernel compiled
with fullgraph=True against eager."""

import pytest
import torch
from conftest import rel_err

pytest.importorskip("triton")
from trainperf.kernels import triton_runs  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(not triton_runs(torch.device(DEVICE)),
                                reason="needs a GPU or TRITON_INTERPRET=1")


def _leaf(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype, requires_grad=True)


def _cases():
    from trainperf.attention.flash_triton import flash_forward_op
    from trainperf.kernels.chunked_loss import chunked_loss_op
    from trainperf.kernels.rmsnorm import rmsnorm_op
    from trainperf.kernels.rope import rope_op
    from trainperf.kernels.swiglu import swiglu_op

    torch.manual_seed(0)
    cos, sin = torch.randn(1, 16, 8, device=DEVICE), torch.randn(1, 16, 8, device=DEVICE)
    targets = torch.randint(0, 24, (20,), device=DEVICE)
    return {
        "rmsnorm": (rmsnorm_op, (_leaf(3, 5, 32), _leaf(32), 1e-6)),
        "swiglu": (swiglu_op, (_leaf(4, 40), _leaf(4, 40))),
        "rope": (rope_op, (_leaf(2, 3, 16, 16), cos, sin, 1.0)),
        "chunked-loss": (chunked_loss_op, (_leaf(20, 16), _leaf(24, 16), targets, 8, False, False)),
        "flash-attention": (flash_forward_op, (_leaf(1, 2, 32, 16), _leaf(1, 2, 32, 16), _leaf(1, 2, 32, 16),
                                               True, 0.25, False)),
    }


@pytest.mark.parametrize("name", ["rmsnorm", "swiglu", "rope", "chunked-loss", "flash-attention"])
def test_each_kernel_is_a_custom_op_whose_fake_and_autograd_agree_with_it(name):
    op, args = _cases()[name]
    # schema, fake (meta) shapes against the real outputs, autograd registration, AOT dispatch
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor",
                                                "test_autograd_registration", "test_aot_dispatch_dynamic"))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["rmsnorm", "swiglu", "rope", "chunked-loss", "flash-attention"])
def test_each_kernel_compiled_fullgraph_matches_eager(name):
    op, args = _cases()[name]
    if name != "chunked-loss":  # its Triton path is bf16 already; the others run in bf16 here
        args = tuple(a.detach().to(torch.bfloat16).requires_grad_(a.requires_grad)
                     if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)

    def loss_and_grads(fn):
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        out = fn(*args)
        first = out[0] if isinstance(out, tuple) else out
        return [first.detach(), *torch.autograd.grad(first.float().sum(), leaves)]

    eager = loss_and_grads(op)
    torch._dynamo.reset()
    compiled = loss_and_grads(torch.compile(op, fullgraph=True))
    for c, e in zip(compiled, eager, strict=True):
        assert rel_err(c, e) < 1e-6, name


@pytest.mark.gpu
def test_flash_attention_compiles_as_the_leaderboard_times_it():
    """torch.compile of a thin (batch, seq, dim) wrapper, o.sum().backward(): no InductorError, the
    same output and gradients as eager."""
    from trainperf.attention.flash_triton import flash_attention_triton

    def attend(q, k, v):
        return flash_attention_triton(q[:, None], k[:, None], v[:, None], causal=True)[:, 0]

    q, k, v = (_leaf(2, 1024, 64, dtype=torch.bfloat16) for _ in range(3))
    results = []
    for fn in (attend, torch.compile(attend, fullgraph=True)):
        o = fn(q, k, v)
        o.sum().backward()
        results.append([o.detach(), *(t.grad.clone() for t in (q, k, v))])
        for t in (q, k, v):
            t.grad = None
    for c, e in zip(*results, strict=True):
        assert rel_err(c, e) < 1e-6
