"""The packed grouped-query attention (`--kv-heads packed`): its block lists and the model's head
reordering on the CPU; against float64 and the Llama step on a Hopper GPU with FlashAttention 4."""

import pytest
import torch
from conftest import rel_err

from trainperf.attention import fa4
from trainperf.attention.fa4_packed import visible_blocks
from trainperf.core.errors import SpecError
from trainperf.models import hf_llama
from trainperf.workloads.llama_sdpa import LlamaSpec, validate

pytest.importorskip("transformers")
hopper = pytest.mark.skipif(not (fa4._INSTALLED and torch.cuda.is_available()
                                 and torch.cuda.get_device_capability() >= (9, 0)),
                            reason="needs flash-attn-4 and a Hopper or newer GPU")


@pytest.mark.parametrize(("seq", "pack", "block_q", "block_k"), [(768, 4, 192, 128), (1000, 4, 128, 128),
                                                                  (300, 2, 64, 32), (256, 1, 128, 128)])
def test_the_block_lists_are_those_of_the_packed_causal_mask(seq, pack, block_q, block_k):
    partial, full = visible_blocks(pack * seq, seq, pack, block_q, block_k)
    r = torch.arange(pack * seq)[:, None]
    k = torch.arange(seq)[None, :]
    visible = pack * k <= r  # row r is position r // pack of query head r % pack
    for i in range(partial.shape[0]):
        for j in range(partial.shape[1]):
            tile = visible[i * block_q:(i + 1) * block_q, j * block_k:(j + 1) * block_k]
            assert bool(full[i, j]) == bool(tile.all()), (i, j)
            assert bool(partial[i, j]) == bool(tile.any() and not tile.all()), (i, j)


def test_packing_the_query_heads_relabels_them_and_keeps_the_layer_s_function():
    cfg = hf_llama.load_config("tiny")
    torch.manual_seed(0)
    model = hf_llama.build_model(cfg, torch.float64, torch.device("cpu"))
    attn = model.model.layers[0].self_attn
    heads, kv, dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    per_kv = heads // kv
    x = torch.randn(3, cfg.hidden_size, dtype=torch.float64)
    q_before = attn.q_proj(x).view(3, heads, dim)
    out = torch.randn(3, heads, dim, dtype=torch.float64)  # what attention hands o_proj, old order
    o_before = attn.o_proj(out.reshape(3, -1))
    hf_llama.pack_query_heads(model)
    assert attn.trainperf_packed_heads
    q_after = attn.q_proj(x).view(3, heads, dim)
    old = [g * per_kv + j for j in range(per_kv) for g in range(kv)]  # new head j·G + g is old g·R + j
    assert old != list(range(heads))
    torch.testing.assert_close(q_after, q_before[:, old], rtol=0, atol=0)
    # the K/V head each query head uses: new head p reads K/V head p % G, as old head old[p] did
    assert [p % kv for p in range(heads)] == [h // per_kv for h in old]
    torch.testing.assert_close(attn.o_proj(out[:, old].reshape(3, -1)), o_before, rtol=1e-12, atol=1e-12)


def test_packed_kv_heads_need_fa4():
    spec = LlamaSpec(sdpa_backend="CUDNN_ATTENTION", batch=2, seq=32, dtype="fp32", model="tiny",
                     device="cpu", kv_heads="packed")
    with pytest.raises(SpecError, match="--kv-heads packed runs on FlashAttention 4"):
        validate(spec)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("seq", [384, 1000])
def test_packed_attention_matches_float64_forward_and_backward(seq):
    from trainperf.attention.fa4_packed import fa4_packed_attention
    from trainperf.attention.reference import naive_attention

    torch.manual_seed(0)
    b, h, g, d = 2, 8, 2, 64
    q = torch.randn(b, seq, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    k, v = (torch.randn(b, seq, g, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
            for _ in range(2))
    do = torch.randn(b, h, seq, d, device="cuda", dtype=torch.bfloat16)
    o = fa4_packed_attention(q, k, v)
    grads = torch.autograd.grad(o, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    # query head p reads K/V head p % g: K/V tiled, not interleaved
    o64 = naive_attention(q64, k64.repeat(1, h // g, 1, 1), v64.repeat(1, h // g, 1, 1), causal=True)
    refs = torch.autograd.grad(o64, (q64, k64, v64), do.double())
    assert rel_err(o, o64) < 1e-2
    for grad, ref in zip(grads, refs, strict=True):
        assert grad.shape == ref.shape and rel_err(grad, ref) < 2e-2


@pytest.mark.gpu
@hopper
def test_the_packed_llama_step_matches_the_native_one():
    from trainperf.workloads.llama_sdpa import LlamaStep, choose_kv_mode

    def first(kv_heads):
        spec = LlamaSpec(sdpa_backend="FA4", batch=2, seq=256, dtype="bf16", optimizer="none",
                         model="llama-3.2-1b", layers=2, kv_heads=kv_heads, loss="chunked")
        validate(spec)
        step = LlamaStep(spec, torch.device("cuda"))
        assert choose_kv_mode(step, "FA4", kv_heads) == kv_heads
        step.model.zero_grad()
        loss = step()
        grads = {n: p.grad.float().norm().item() for n, p in step.model.named_parameters()
                 if "q_proj" not in n and "o_proj" not in n and p.grad is not None}  # those two are permuted
        return loss.item(), grads

    loss, grads = first("packed")
    ref_loss, ref_grads = first("native")
    assert loss == pytest.approx(ref_loss, rel=1e-2)
    assert grads.keys() == ref_grads.keys() and grads
    for name, norm in grads.items():
        assert norm == pytest.approx(ref_grads[name], rel=3e-2), name
