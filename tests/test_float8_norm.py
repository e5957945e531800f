"""The RMSNorm inside the float8 cast (kernels/float8_norm.py): the kernel against LlamaRMSNorm and
PyTorch's cast, its backward against autograd in float64, and a decoder layer with its norms in the
casts against the same layer with them apart."""

import pytest
import torch
from conftest import cast_ref, float8_mismatches, rel_err

from trainperf.kernels import float8_mlp as f8
from trainperf.kernels import float8_norm, llama_rmsnorm  # noqa: F401  (float8_norm registers the op)
from trainperf.models import hf_llama

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# bf16 arithmetic is wrong in the interpreter; there the kernel rounds to float16 where it would to bf16
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float16


@pytest.mark.parametrize("with_residual", [False, True])
def test_the_kernel_adds_normalises_and_casts_with_the_transpose_and_amax(with_residual):
    torch.manual_seed(0)
    m, n, eps = 80, 272, 1e-5  # rows past one program's, columns past two chunks'
    x = torch.randn(m, n, device=DEVICE, dtype=DTYPE)
    residual = torch.randn(m, n, device=DEVICE, dtype=DTYPE) if with_residual else None
    weight = (1 + torch.randn(n, device=DEVICE) / 4).to(DTYPE)
    state = f8.ScaleState(torch.device(DEVICE))
    for _ in range(2):  # calibrating, then at the scale of the first
        s, y, yt = torch.ops.trainperf.float8_rms_norm_cast(x, residual, weight, eps, *state.tensors(), f8.X)
        summed = x if residual is None else x + residual
        ref = llama_rmsnorm.rms_norm_reference(summed, weight, eps).float()
        if with_residual:
            assert torch.equal(s, summed)
        else:
            assert s.numel() == 0
        assert y.dtype == yt.dtype == f8.E4M3 and torch.equal(yt.view(torch.uint8), y.t().view(torch.uint8))
        want = cast_ref(ref, state.scale[f8.X], f8.E4M3)
        differ = float8_mismatches(y, want)
        # the kernel's 1/rms (its own order of summing a row's squares; Triton's rsqrt) may be a bit
        # off PyTorch's: a value on a rounding boundary of the normalised tensor then casts one
        # float8 step (at most 2⁻³ of it) away
        off = ((y.float() - want.float()).abs() / want.float().abs().clamp_min(1e-3))[differ]
        assert differ.float().mean() < 2e-3 and (off <= 0.13).all(), (int(differ.sum()), off.max())
        assert state.now[f8.X].item() == pytest.approx(ref.abs().max().item(), rel=1e-2)
    assert state.calibrated[f8.X]


def test_the_backward_is_autograds_through_llama_rmsnorm():
    torch.manual_seed(0)
    s = torch.randn(24, 64, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(64, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(24, 64, dtype=torch.float64)
    llama_rmsnorm.rms_norm_reference(s, weight, 1e-5).backward(grad)
    grad_s, grad_weight = llama_rmsnorm.rms_norm_backward(s.detach(), weight.detach(), 1e-5, grad)
    # computed in float32, as it is for bf16 inputs
    assert rel_err(grad_s, s.grad) < 1e-5 and rel_err(grad_weight, weight.grad) < 1e-5


def _float8_layer(norms_in_casts: bool, monkeypatch) -> torch.nn.Module:
    monkeypatch.setattr(hf_llama, "NORMS_IN_CASTS", norms_in_casts)
    torch.manual_seed(0)
    model = hf_llama.build_model(hf_llama.load_config("tiny", layers=2), torch.float32, torch.device(DEVICE))
    hf_llama.set_attention(model, hf_llama.attention_name("MATH", expand_kv=False))
    hf_llama.float8_layers(model, attention=True)
    return model


def test_a_layer_with_its_norms_in_the_casts_trains_as_with_them_apart(monkeypatch):
    fused, apart = _float8_layer(True, monkeypatch), _float8_layer(False, monkeypatch)
    assert list(fused.state_dict()) == list(apart.state_dict())
    layer = fused.model.layers[0]
    assert layer.self_attn.float8_norm is layer.input_layernorm
    calls = []
    for norm in (layer.input_layernorm, layer.post_attention_layernorm):
        norm.register_forward_hook(lambda *_: calls.append(1))
    ids = torch.randint(0, fused.config.vocab_size, (2, 32), device=DEVICE)
    for _ in range(2):
        losses = []
        for model in (fused, apart):
            model.zero_grad()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-4)
        grads = dict(apart.named_parameters())
        for name, param in fused.named_parameters():
            # equal but where summing a row's squares in another order moves a value across a
            # float8 rounding step
            assert rel_err(param.grad, grads[name].grad) < 1e-2, name
    assert not calls  # the norms ran inside the casts, not as modules
