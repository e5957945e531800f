"""Shared fixtures; GPU-only tests are skipped where no CUDA device is visible."""

import os

import pytest
import torch

# Without a GPU, Triton kernels run in Triton's interpreter (read when kernels are defined).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "results.db"


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """‖a − ref‖ / ‖ref‖ in float64."""
    return ((a.double() - ref.double()).norm() / ref.double().norm()).item()


def check_gqa_attention_against_float64(name: str, causal: bool, kv_heads: int,
                                        tolerance: tuple[float, float] = (1e-2, 2e-2),
                                        head_dim: int = 64) -> None:
    """Attention `name` of bf16 inputs on the GPU, with `kv_heads` K/V heads for 8 query heads,
    against float64 attention of the same inputs: the output and the three gradients, each within
    its share of `tolerance` (the output's, the gradients') in relative error."""
    from trainperf.attention.reference import naive_attention
    from trainperf.attention.registry import get_attention

    torch.manual_seed(0)
    b, h, n, d = 2, 8, 384, head_dim
    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(b, kv_heads, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    do = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    o = get_attention(name, q.device)(q, k, v, causal=causal)
    grads = torch.autograd.grad(o, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    rep = h // kv_heads
    o64 = naive_attention(q64, k64.repeat_interleave(rep, 1), v64.repeat_interleave(rep, 1), causal=causal)
    refs = torch.autograd.grad(o64, (q64, k64, v64), do.double())
    assert rel_err(o, o64) < tolerance[0]
    for g, ref in zip(grads, refs, strict=True):
        assert g.shape == ref.shape and rel_err(g, ref) < tolerance[1]


@pytest.fixture
def compiled_graphs():
    """How many graphs torch.compile has made so far (Dynamo's counter), once a C++ compiler for
    the CPU backend is known to be there (else the clear error of `check_compiler`)."""
    from torch._dynamo.utils import counters

    from trainperf.workloads.precision import check_compiler
    check_compiler(torch.device("cpu"))
    return lambda: counters["stats"]["unique_graphs"]


@pytest.fixture(scope="session")
def breakdown_text(tmp_path_factory) -> str:
    """A breakdown JSON as `trainperf profile` writes it (tiny attention on the CPU)."""
    from typer.testing import CliRunner

    from trainperf.cli import app

    out = tmp_path_factory.mktemp("profile")
    args = ["profile", "attention", "--attention", "sdpa", "--seq", "32", "--head-dim", "16", "--batch", "1",
            "--device", "cpu", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return next(out.glob("*.json")).read_text()
