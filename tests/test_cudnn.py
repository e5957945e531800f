"""The cuDNN frontend inside trainperf: unsupported paths and op registration on the CPU; numerics
against PyTorch and float64 on the GPU."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import check_gqa_attention_against_float64, rel_err
from torch._subclasses.fake_tensor import FakeTensorMode
from typer.testing import CliRunner

from trainperf.attention.registry import get_attention
from trainperf.cli import app
from trainperf.core.errors import Unsupported
from trainperf.kernels import cudnn_graphs
from trainperf.models.norms import make_norm

runner = CliRunner()
cudnn_present = pytest.mark.skipif(not cudnn_graphs.cudnn_installed(),
                                   reason="needs nvidia-cudnn-frontend")


@pytest.fixture
def no_cudnn(monkeypatch):
    monkeypatch.setattr(cudnn_graphs, "cudnn_installed", lambda: False)


def test_without_the_package_every_cudnn_choice_is_unsupported_naming_it(no_cudnn):
    with pytest.raises(Unsupported, match="nvidia-cudnn-frontend"):
        make_norm("cudnn", 8)(torch.randn(2, 8))
    with pytest.raises(Unsupported, match=r"trainperf\[cudnn\]"):
        get_attention("cudnn-fe", torch.device("cpu"))


def test_with_the_package_the_cpu_is_still_unsupported(monkeypatch):
    monkeypatch.setattr(cudnn_graphs, "cudnn_installed", lambda: True)
    with pytest.raises(Unsupported, match="needs a CUDA GPU"):
        make_norm("cudnn", 8)(torch.randn(2, 8))
    with pytest.raises(Unsupported, match="needs a CUDA GPU"):
        get_attention("cudnn-fe", torch.device("cpu"))


def test_the_ops_are_registered_with_fake_shapes_and_autograd():
    from trainperf.attention.cudnn_fe import cudnn_sdpa_op
    from trainperf.kernels.cudnn_rmsnorm import cudnn_rms_norm_op

    with FakeTensorMode():
        x = torch.empty(3, 5, 16, dtype=torch.bfloat16, requires_grad=True)
        w = torch.empty(16, dtype=torch.bfloat16, requires_grad=True)
        y, inv_rms = cudnn_rms_norm_op(x, w, 1e-5)
        assert y.shape == x.shape and inv_rms.shape == (3, 5) and inv_rms.dtype == torch.float32
        y.sum().backward()
        assert x.grad.shape == x.shape and w.grad.shape == w.shape

        q = torch.empty(2, 8, 32, 64, dtype=torch.bfloat16, requires_grad=True)
        k = torch.empty(2, 2, 32, 64, dtype=torch.bfloat16, requires_grad=True)
        v = torch.empty(2, 2, 32, 64, dtype=torch.bfloat16, requires_grad=True)
        o, stats = cudnn_sdpa_op(q, k, v, True, 0.125)
        assert o.shape == q.shape and stats.shape == (2, 8, 32, 1)
        assert o.transpose(1, 2).is_contiguous()  # laid out [batch, seq, heads, dim]
        o.sum().backward()
        assert (q.grad.shape, k.grad.shape, v.grad.shape) == (q.shape, k.shape, v.shape)


def test_llama_cudnn_fe_without_the_package_is_an_unsupported_row(no_cudnn):
    pytest.importorskip("transformers")
    from trainperf.core.runner import measure_case
    from trainperf.workloads.llama_sdpa import LlamaSpec, measure_llama

    spec = LlamaSpec(sdpa_backend="CUDNN_FE", batch=1, seq=16, dtype="fp32", model="tiny", device="cpu",
                     warmup=1, iters=1)
    rec = measure_case("llama", spec, measure_llama, {"device": "cpu"})
    assert rec.status == "unsupported" and "nvidia-cudnn-frontend" in rec.reason


def test_the_8b_preset_is_llama_3_1_8b():
    pytest.importorskip("transformers")
    from trainperf.models import hf_llama

    cfg = hf_llama.load_config("llama-3.1-8b")
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (4096, 14336, 32)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size) == (32, 8, 128256)
    model = hf_llama.build_model(cfg, torch.bfloat16, torch.device("meta"))
    assert sum(p.numel() for p in model.parameters()) == 8_030_261_248  # Meta's published count


def test_cudnn_study_on_the_cpu_profiles_the_pytorch_side_and_names_the_missing_package(no_cudnn, tmp_path):
    pytest.importorskip("transformers")
    res = runner.invoke(app, ["cudnn-study", "--device", "cpu", "--phase", "forward", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "cudnn side unsupported" in res.output and "nvidia-cudnn-frontend" in res.output
    profile = json.loads((tmp_path / "cudnn_study_forward_pytorch.json").read_text())
    ranges = {r["range"]: r for r in profile["ranges"]}
    # the study's names, each layer's call once, and no backward in a forward-only profile
    assert ranges["fwd"]["calls"] == 1 and ranges["fwd.layer.attn.prenorm"]["calls"] == 2
    assert {"fwd.layer.attn.attn.gqa", "fwd.layer.attn.attn.rope", "fwd.output_norm"} <= set(ranges)
    assert not any(name.startswith("bwd") for name in ranges)


# ---- GPU: numerics -------------------------------------------------------------------------


@pytest.mark.gpu
@cudnn_present
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cudnn_rmsnorm_matches_pytorch_output_and_gradients(dtype):
    torch.manual_seed(0)
    x = torch.randn(4, 256, 1024, device="cuda", dtype=dtype, requires_grad=True)
    w = (1 + 0.1 * torch.randn(1024, device="cuda", dtype=dtype)).requires_grad_()
    dy = torch.randn_like(x)
    norm = make_norm("cudnn", 1024).cuda().to(dtype)
    norm.weight = torch.nn.Parameter(w.detach().clone())
    y = norm(x)
    gx, gw = torch.autograd.grad(y, (x, norm.weight), dy)
    y_ref = F.rms_norm(x, (1024,), w, 1e-6)
    gx_ref, gw_ref = torch.autograd.grad(y_ref, (x, w), dy)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel_err(y, y_ref) < tol and rel_err(gx, gx_ref) < tol and rel_err(gw, gw_ref) < tol


@pytest.mark.gpu
@cudnn_present
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [8, 2])
def test_cudnn_attention_matches_float64_forward_and_backward(causal, kv_heads):
    check_gqa_attention_against_float64("cudnn-fe", causal, kv_heads)


@pytest.mark.gpu
@cudnn_present
def test_an_8b_layer_with_every_cudnn_swap_gives_the_stock_loss_and_gradients():
    from trainperf.workloads.llama_sdpa import LlamaSpec, LlamaStep, choose_kv_mode

    results = []
    for backend, norm in (("CUDNN_ATTENTION", "torch"), ("CUDNN_FE", "cudnn")):
        spec = LlamaSpec(sdpa_backend=backend, norm=norm, batch=1, seq=1024, model="llama-3.1-8b", layers=1,
                         optimizer="none")
        step = LlamaStep(spec, torch.device("cuda"))
        assert choose_kv_mode(step, backend) == "native"
        loss = step()
        grads = {n: p.grad.float() for n, p in step.model.named_parameters() if p.grad is not None}
        results.append((loss.item(), grads))
        del step
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert abs(loss_b - loss_a) / abs(loss_a) < 1e-3
    assert grads_a.keys() == grads_b.keys()
    for name, g in grads_a.items():
        assert rel_err(grads_b[name], g) < 3e-2, name


@pytest.mark.gpu
@cudnn_present
def test_the_cudnn_ops_compile_fullgraph_and_match_eager():
    from trainperf.attention.cudnn_fe import cudnn_attention
    from trainperf.kernels.cudnn_rmsnorm import rmsnorm_cudnn

    torch.manual_seed(0)
    x = torch.randn(2, 128, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    q, k, v = (torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def f(x, w, q, k, v):
        return rmsnorm_cudnn(x, w, 1e-5).sum() + cudnn_attention(q, k, v).float().sum()

    eager = f(x, w, q, k, v)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)(x, w, q, k, v)
    torch.testing.assert_close(compiled, eager, rtol=1e-3, atol=1e-2)
