"""quack's fused MLP (`--swiglu quack`): the module's math against transformers' Llama MLP, the
unsupported rows, the key quack needs for cutlass-dsl's objects, and on a Hopper GPU quack's
kernels against float64."""

import contextvars
import sys
import types

import pytest
import torch

from trainperf.core.errors import Unsupported
from trainperf.kernels import quack_mlp
from trainperf.kernels.quack_mlp import FusedSwiGLUMLP
from trainperf.models import hf_llama


def _tiny(dtype=torch.float64):
    torch.manual_seed(0)
    return hf_llama.build_model(hf_llama.load_config("tiny"), dtype, torch.device("cpu"))


def test_the_fused_mlp_computes_what_the_llama_mlp_does_with_the_same_gradients():
    mlp = _tiny().model.layers[0].mlp
    fused = FusedSwiGLUMLP(mlp)
    x = torch.randn(3, 5, mlp.gate_proj.in_features, dtype=torch.float64)
    dy = torch.randn(3, 5, mlp.down_proj.out_features, dtype=torch.float64)
    mlp(x).backward(dy)
    torch.testing.assert_close(fused(x), mlp(x), rtol=1e-12, atol=1e-12)
    fused(x).backward(dy)
    stacked = torch.cat([mlp.gate_proj.weight.grad, mlp.up_proj.weight.grad])
    torch.testing.assert_close(fused.gate_up.weight.grad, stacked, rtol=1e-12, atol=1e-12)
    assert fused.down_proj is mlp.down_proj  # the down projection is the model's own


def test_the_fused_mlp_adds_the_residual_and_passes_it_the_output_gradient():
    fused = FusedSwiGLUMLP(_tiny().model.layers[0].mlp)
    x = torch.randn(2, 7, fused.gate_up.in_features, dtype=torch.float64)
    residual = torch.randn(2, 7, fused.down_proj.out_features, dtype=torch.float64, requires_grad=True)
    dy = torch.randn_like(residual)
    out = fused(x, residual=residual)
    torch.testing.assert_close(out, residual + fused(x), rtol=1e-12, atol=1e-12)
    out.backward(dy)
    torch.testing.assert_close(residual.grad, dy, rtol=0, atol=0)


def test_fusing_every_mlp_keeps_the_model_s_loss_and_hands_each_mlp_its_residual(monkeypatch):
    model, ids = _tiny(), torch.randint(0, 100, (2, 16))
    ref = model(input_ids=ids, labels=ids).loss
    matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    hf_llama.fuse_mlps(model)
    assert all(isinstance(layer.mlp, FusedSwiGLUMLP) for layer in model.model.layers)
    assert sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)) == matmul
    given = []
    own = FusedSwiGLUMLP.forward
    monkeypatch.setattr(FusedSwiGLUMLP, "forward",
                        lambda self, x, residual=None: given.append(residual) or own(self, x, residual))
    torch.testing.assert_close(model(input_ids=ids, labels=ids).loss, ref, rtol=1e-12, atol=0)
    assert len(given) == len(model.model.layers) and all(r is not None for r in given)


@pytest.mark.parametrize("swap", ["swiglu", "gemm"])
def test_quack_swaps_are_unsupported_without_the_package_or_off_hopper(monkeypatch, swap):
    model = _tiny(torch.float32)
    monkeypatch.setattr(quack_mlp, "_INSTALLED", False)
    monkeypatch.setattr(quack_mlp, "_PROBLEM", "not installed")
    needs = rf"--{swap} quack needs quack-kernels: pip install 'trainperf\[fa4\]'"
    with pytest.raises(Unsupported, match=needs):
        hf_llama.apply_swaps(model, **{swap: "quack"})
    # installed without the CuTe DSL's Python sources (nvidia-cutlass-dsl-libs-core), as seen on a GPU machine
    missing = "ModuleNotFoundError: No module named 'cutlass.cutlass_dsl'"
    monkeypatch.setattr(quack_mlp, "_PROBLEM", missing)
    with pytest.raises(Unsupported, match=rf"--{swap} quack needs quack-kernels \(installed, but its import "
                                          rf"fails: {missing}\): pip"):
        hf_llama.apply_swaps(model, **{swap: "quack"})
    monkeypatch.setattr(quack_mlp, "_INSTALLED", True)
    with pytest.raises(Unsupported, match="Hopper or newer GPU"):
        hf_llama.apply_swaps(model, **{swap: "quack"})
    assert not any(isinstance(m, FusedSwiGLUMLP) for m in model.modules())
    assert not any("forward" in vars(m) for m in model.modules() if isinstance(m, torch.nn.Linear))


def test_quack_gets_keys_for_the_dsl_s_objects_and_still_refuses_others(monkeypatch):
    def strict(value, seen):
        if isinstance(value, (int, str)):
            return ("value", value)
        raise TypeError(f"no key for {value!r}")

    identity = types.SimpleNamespace(semantic_value_key=strict)
    for name, module in (("quack", types.ModuleType("quack")),
                         ("quack.gemm_runtime", types.ModuleType("quack.gemm_runtime")),
                         ("quack.gemm_runtime.identity", identity)):
        monkeypatch.setitem(sys.modules, name, module)
    sys.modules["quack"].gemm_runtime = sys.modules["quack.gemm_runtime"]
    sys.modules["quack.gemm_runtime"].identity = identity
    quack_mlp.load_quack()
    key = identity.semantic_value_key
    assert key(contextvars.ContextVar("_LOC"), set()) == ("contextvar", "_LOC")
    assert key(type(compile("1", "", "eval")).co_positions, set())[0] == "by-type"  # a builtin
    assert key(7, set()) == ("value", 7)

    class Opaque:
        pass

    with pytest.raises(TypeError, match="no key"):
        key(Opaque(), set())
    quack_mlp.load_quack()
    assert identity.semantic_value_key is key  # keyed once


@pytest.mark.gpu
def test_quack_s_fused_mlp_matches_float64_in_bf16():
    if not torch.cuda.is_available() or not quack_mlp.quack_runs(torch.device("cuda")):
        pytest.skip("needs quack-kernels on a Hopper or newer GPU")
    torch.manual_seed(0)
    cfg = hf_llama.load_config("llama-3.2-1b", 1)
    model = hf_llama.build_model(cfg, torch.bfloat16, torch.device("cuda"))
    fused = FusedSwiGLUMLP(model.model.layers[0].mlp)
    x = torch.randn(2, 512, cfg.hidden_size, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    residual = torch.randn(2, 512, cfg.hidden_size, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(2, 512, cfg.hidden_size, device="cuda", dtype=torch.bfloat16)
    y = fused(x, residual=residual)
    y.backward(dy)
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, fused.gate_up.weight))
    gate, up = (x64 @ w64.t()).chunk(2, dim=-1)
    mlp64 = (torch.nn.functional.silu(gate) * up) @ fused.down_proj.weight.double().t()
    (residual.detach().double() + mlp64).backward(dy.double())

    def rel(a, b):
        return ((a.double() - b).norm() / b.norm()).item()

    assert rel(y, residual.detach().double() + mlp64) < 1e-2
    assert rel(fused(x), mlp64) < 1e-2  # and without a residual
    assert rel(x.grad, x64.grad) < 1e-2
    assert rel(fused.gate_up.weight.grad, w64.grad) < 1e-2
    assert torch.equal(residual.grad, dy)
