import pytest
import torch

from trainperf.models.lm import LMConfig, TransformerLM, lm_loss
from trainperf.models.presets import PRESETS, get_preset

TINY = LMConfig(vocab_size=97, context_length=32, d_model=32, d_ff=64, n_layers=2, n_heads=4)


def test_logits_shape():
    model = TransformerLM(TINY)
    out = model(torch.randint(0, 97, (3, 17)))
    assert out.shape == (3, 17, 97)


@pytest.mark.parametrize("attention", ["naive", "sdpa"])
def test_changing_a_future_token_never_changes_an_earlier_logit(attention):
    torch.manual_seed(0)
    model = TransformerLM(LMConfig(**{**TINY.__dict__, "attention": attention})).double()
    x = torch.randint(0, 97, (2, 20))
    y = x.clone()
    y[:, 12] = (y[:, 12] + 1) % 97
    a, b = model(x), model(y)
    assert torch.equal(a[:, :12], b[:, :12])
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_naive_and_sdpa_models_agree():
    torch.manual_seed(0)
    naive = TransformerLM(LMConfig(**{**TINY.__dict__, "attention": "naive"})).double()
    sdpa = TransformerLM(LMConfig(**{**TINY.__dict__, "attention": "sdpa"})).double()
    sdpa.load_state_dict(naive.state_dict())
    x = torch.randint(0, 97, (2, 20))
    torch.testing.assert_close(naive(x), sdpa(x))


@pytest.mark.parametrize("norm", ["torch", "fused"])
def test_loss_decreases_on_a_fixed_batch(norm):
    torch.manual_seed(0)
    model = TransformerLM(LMConfig(**{**TINY.__dict__, "norm": norm}))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, 97, (4, 17))
    losses = []
    for _ in range(40):
        loss = lm_loss(model(tokens[:, :-1]), tokens[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_matmul_params_counts_every_linear():
    model = TransformerLM(TINY)
    d, f, v, n = 32, 64, 97, 2
    assert model.matmul_params() == n * (3 * d * d + d * d + 3 * d * f) + d * v


@pytest.mark.parametrize("bad, message", [
    ({"d_model": 30, "n_heads": 4}, "not divisible"),
    ({"n_layers": 0}, "must be positive"),
    ({"attention": "magic"}, "valid choices"),
    ({"norm": "layer"}, "valid choices"),
])
def test_bad_config_is_rejected(bad, message):
    with pytest.raises(ValueError, match=message):
        LMConfig(**{**TINY.__dict__, **bad})


def test_presets_match_the_brief():
    assert (PRESETS["2.7B"].d_model, PRESETS["2.7B"].n_layers) == (2560, 32)
    assert PRESETS["xl"].d_model % PRESETS["xl"].n_heads == 0
    with pytest.raises(ValueError, match="valid choices: tiny"):
        get_preset("huge")


def test_each_model_compiles_its_layers_afresh():
    """A sweep's cases share the layers' code objects: a later case compiled against an earlier
    one's guards gets dynamic shapes, or runs eagerly past the recompile limit."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from trainperf.models.lm import Block

    cfg = LMConfig(vocab_size=64, context_length=64, d_model=64, d_ff=256, n_layers=2, n_heads=4)
    first = TransformerLM(cfg)
    first.compile_layers()
    first(torch.randint(0, 64, (2, 16)))
    assert _debug_get_cache_entry_list(Block.forward.__code__)  # the first model's compiled layers
    TransformerLM(cfg).compile_layers()
    assert not _debug_get_cache_entry_list(Block.forward.__code__)
