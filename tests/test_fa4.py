"""FlashAttention 4 inside trainperf: the unsupported paths and the ops' registration on the CPU;
numerics against float64, the compiled ops and the Llama step with FA4 on a Hopper GPU."""

import pytest
import torch
from conftest import check_gqa_attention_against_float64, rel_err
from torch._subclasses.fake_tensor import FakeTensorMode

from trainperf.attention import fa4
from trainperf.attention.registry import get_attention
from trainperf.core.errors import Unsupported

hopper = pytest.mark.skipif(not (fa4._INSTALLED and torch.cuda.is_available()
                                 and torch.cuda.get_device_capability() >= (9, 0)),
                            reason="needs flash-attn-4 and a Hopper or newer GPU")


def test_without_the_package_fa4_is_unsupported_naming_the_install(monkeypatch):
    monkeypatch.setattr(fa4, "_INSTALLED", False)
    with pytest.raises(Unsupported, match=r"pip install 'trainperf\[fa4\]'"):
        get_attention("fa4", torch.device("cpu"))


def test_an_install_that_does_not_import_is_unsupported_naming_why(monkeypatch, tmp_path):
    """As flash-attn-4 with nvidia-cutlass-dsl 4.8 lacking its libs-core wheel: found, but its
    interface fails on `import cutlass.cute`."""
    from trainperf.core.extras import import_problem

    package = tmp_path / "broken_extra"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "interface.py").write_text("import cutlass_missing_part.cute\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    problem = import_problem("broken_extra.interface")
    assert problem == "ModuleNotFoundError: No module named 'cutlass_missing_part'"
    assert import_problem("no_such_extra.interface") == "not installed"
    assert import_problem("json.decoder") is None
    monkeypatch.setattr(fa4, "_INSTALLED", False)
    monkeypatch.setattr(fa4, "_PROBLEM", problem)
    with pytest.raises(Unsupported, match=r"installed, but its import fails: ModuleNotFoundError: No module "
                                          r"named 'cutlass_missing_part'\): pip install 'trainperf\[fa4\]'"):
        get_attention("fa4", torch.device("cpu"))


def test_with_the_package_the_cpu_is_still_unsupported(monkeypatch):
    monkeypatch.setattr(fa4, "_INSTALLED", True)
    with pytest.raises(Unsupported, match="needs a Hopper or newer GPU"):
        get_attention("fa4", torch.device("cpu"))


def test_the_fa4_ops_are_registered_with_fake_shapes_and_autograd():
    with FakeTensorMode():
        q = torch.empty(2, 32, 8, 64, dtype=torch.bfloat16, requires_grad=True)  # [batch, seq, heads, dim]
        k = torch.empty(2, 32, 2, 64, dtype=torch.bfloat16, requires_grad=True)
        v = torch.empty(2, 32, 2, 64, dtype=torch.bfloat16, requires_grad=True)
        o, lse = fa4.fa4_attention_op(q, k, v, True, 0.125)
        assert o.shape == q.shape and lse.shape == (2, 8, 32) and lse.dtype == torch.float32
        o.sum().backward()
        assert (q.grad.shape, k.grad.shape, v.grad.shape) == (q.shape, k.shape, v.shape)


@pytest.mark.parametrize("kv_heads", ["native", "packed"])
def test_llama_fa4_without_the_package_is_an_unsupported_row(monkeypatch, kv_heads):
    pytest.importorskip("transformers")
    from trainperf.core.runner import measure_case
    from trainperf.workloads.llama_sdpa import RECIPES, LlamaSpec, measure_llama

    monkeypatch.setattr(fa4, "_INSTALLED", False)
    spec = LlamaSpec(**RECIPES["fa4"], batch=1, seq=16, dtype="fp32", model="tiny", device="cpu",
                     warmup=1, iters=1, kv_heads=kv_heads)
    rec = measure_case("llama", spec, measure_llama, {"device": "cpu"})
    assert rec.status == "unsupported" and "trainperf[fa4]" in rec.reason


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [8, 2])
def test_fa4_matches_float64_forward_and_backward(causal, kv_heads):
    check_gqa_attention_against_float64("fa4", causal, kv_heads)


@pytest.mark.gpu
@hopper
def test_fa4_compiles_fullgraph_and_matches_eager():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))

    def f(q, k, v):
        return fa4.fa4_attention(q, k, v).float().square().sum()

    eager = torch.autograd.grad(f(q, k, v), (q, k, v))
    torch._dynamo.reset()
    compiled = torch.autograd.grad(torch.compile(f, fullgraph=True)(q, k, v), (q, k, v))
    for a, b in zip(compiled, eager, strict=True):
        assert rel_err(a, b) < 1e-3
