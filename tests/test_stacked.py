"""Stacked projections (`--proj stacked`): the same loss and gradients as transformers' separate
projections, the refusals, and the CLI flag."""

import pytest
import torch

from trainperf.models import hf_llama, stacked


def _tiny_pair():
    cfg = hf_llama.load_config("tiny")
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        model = hf_llama.build_model(cfg, torch.float64, torch.device("cpu"))
        hf_llama.set_attention(model, hf_llama.attention_name("MATH", False))
        models.append(model)
    return models


def test_stacked_projections_keep_the_loss_and_give_the_stacked_gradients():
    stock, model = _tiny_pair()
    assert hf_llama.apply_swaps(model, proj="stacked") == ["proj=stacked"]
    layer = model.model.layers[0]
    assert not hasattr(layer.self_attn, "q_proj") and isinstance(layer.mlp, stacked.StackedMLP)
    linear_weights = [sum(m.weight.numel() for m in m_.modules() if isinstance(m, torch.nn.Linear))
                      for m_ in (stock, model)]
    assert linear_weights[0] == linear_weights[1]  # the FLOP count reads these
    ids = torch.randint(0, stock.config.vocab_size, (2, 12))
    losses = [m(input_ids=ids, labels=ids).loss for m in (stock, model)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-12, atol=0)
    for loss in losses:
        loss.backward()
    ref_attn, ref_mlp = stock.model.layers[0].self_attn, stock.model.layers[0].mlp
    qkv = torch.cat([ref_attn.q_proj.weight.grad, ref_attn.k_proj.weight.grad, ref_attn.v_proj.weight.grad])
    torch.testing.assert_close(layer.self_attn.qkv_proj.weight.grad, qkv, rtol=1e-10, atol=1e-12)
    gate_up = torch.cat([ref_mlp.gate_proj.weight.grad, ref_mlp.up_proj.weight.grad])
    torch.testing.assert_close(layer.mlp.gate_up.weight.grad, gate_up, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.self_attn.o_proj.weight.grad, ref_attn.o_proj.weight.grad,
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("swiglu", "library", "message"), [
    ("triton", "none", "--swiglu triton runs apart"),
    ("torch", "liger", "--library liger patches transformers' separate projections"),
])
def test_stacked_projections_refuse_what_takes_them_apart(swiglu, library, message):
    with pytest.raises(ValueError, match=message):
        stacked.check_proj("stacked", swiglu, library)
    stacked.check_proj("separate", swiglu, library)  # separate goes with anything


def test_stacked_projections_take_no_kv_cache():
    _, model = _tiny_pair()
    hf_llama.apply_swaps(model, proj="stacked")
    from trainperf.core.errors import Unsupported

    with pytest.raises(Unsupported, match="no KV cache"):
        model(input_ids=torch.randint(0, 100, (1, 4)), use_cache=True)
