"""The float8 attention projections of `--float8 trainperf` (kernels/float8_linear.py): one
float8 Linear against float64, and a decoder layer whose projections are float8 against the same
layer in float64. On the CPU the casts run in Triton's interpreter, whose float8 rounding loses a
little more (tests/test_float8_mlp.py); the bounds there are looser."""

import pytest
import torch
from conftest import rel_err
from test_float8_mlp import _cast_ref, assert_float8_equal

from trainperf.core.errors import Unsupported
from trainperf.kernels import float8_linear as f8l
from trainperf.kernels import stores_right
from trainperf.kernels.float8_linear import float8_linear, linear_state
from trainperf.models import hf_llama

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# e4m3 holds 3 bits of mantissa, e5m2 (gradients) 2: a few percent per product
BOUNDS = (0.08, 0.12) if DEVICE == "cuda" else (0.25, 0.3)  # (output, gradients)
# (loss, gradients) of a compiled model against the same model eager: equal on the CPU; on a GPU
# Inductor's float32 arithmetic moves a few values across a float8 rounding step
EXACT = (1e-3, 0.05) if DEVICE == "cuda" else (1e-5, 1e-4)


def test_a_float8_linear_follows_float64():
    torch.manual_seed(0)
    x = torch.randn(4, 32, 96, device=DEVICE, dtype=torch.float64)
    w = torch.randn(80, 96, device=DEVICE, dtype=torch.float64) / 10
    dy = torch.randn(4, 32, 80, device=DEVICE, dtype=torch.float64)
    x64, w64 = x.clone().requires_grad_(), w.clone().requires_grad_()
    (x64 @ w64.t()).backward(dy)
    state = linear_state(w)
    for _ in range(3):  # calibrating, then with the scales of earlier iterations
        xb, wb = x.bfloat16().requires_grad_(), w.bfloat16().requires_grad_()
        y = float8_linear(xb, wb, state)
        y.backward(dy.bfloat16())
        assert y.shape == (4, 32, 80) and y.dtype == xb.grad.dtype == wb.grad.dtype == torch.bfloat16
        assert rel_err(y, x @ w.t()) < BOUNDS[0]
        assert rel_err(xb.grad, x64.grad) < BOUNDS[1] and rel_err(wb.grad, w64.grad) < BOUNDS[1]
    assert all(state.calibrated)


def _rope_inputs(t: int, d: int, cos_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [cos_batch, t, d] with repeated halves, as a Llama's rotary module makes them."""
    angles = torch.rand(cos_batch, t, d // 2, device=DEVICE) * 100
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def test_the_rope_gradient_reference_is_transformers_rope_s_backward():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(0)
    q = torch.randn(2, 5, 4, 8, dtype=torch.float64, device=DEVICE, requires_grad=True)
    k = torch.randn(2, 5, 2, 8, dtype=torch.float64, device=DEVICE, requires_grad=True)
    v = torch.randn(2, 5, 2, 8, dtype=torch.float64, device=DEVICE)
    cos, sin = (t.double() for t in _rope_inputs(5, 8, 2))
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    rq, rk = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
    torch.autograd.backward([rq, rk], [dq, dk])
    want = torch.cat([q.grad, k.grad, v], dim=2).reshape(10, -1).float()
    torch.testing.assert_close(f8l.qkv_rope_grad_reference(dq, dk, v, cos, sin), want)


@pytest.mark.parametrize(("d", "cos_batch"), [(64, 2), (128, 1)])
def test_the_qkv_gradient_cast_takes_q_and_k_back_through_rope_and_stacks_v(d, cos_batch):
    torch.manual_seed(0)
    b, t, hq, hk = 2, 40, 4, 2  # 80 rows: edges that fill no whole tile
    dq = torch.randn(b, hq, t, d, device=DEVICE).bfloat16().transpose(1, 2)  # as attention hands it back
    dk, dv = (torch.randn(b, t, hk, d, device=DEVICE).bfloat16() for _ in range(2))
    cos, sin = (x.bfloat16() for x in _rope_inputs(t, d, cos_batch))
    state = linear_state(dk)
    y, yt = f8l._qkv_rope_grad_op(dq, dk, dv, cos, sin, *state.tensors())
    want = f8l.qkv_rope_grad_reference(dq, dk, dv, cos, sin)
    assert y.shape == (b * t, (hq + 2 * hk) * d) and y.dtype == torch.float8_e5m2
    assert torch.equal(yt.view(torch.uint8), y.view(torch.uint8).t())
    ref = _cast_ref(want, state.scale[f8l.GRAD], torch.float8_e5m2)
    if DEVICE == "cuda":  # a fused multiply-add moves a rare float32 sum across a float8 rounding point
        steps = (y.view(torch.uint8).int() - ref.view(torch.uint8).int()).abs()
        assert steps.max() <= 1 and (steps > 0).float().mean() < 1e-3
    else:
        assert_float8_equal(y, ref)
    assert state.now[f8l.GRAD] == want.abs().max()


@pytest.mark.parametrize(("d", "cos_batch", "dtype"), [(64, 2, torch.float32), (128, 1, torch.float16)]
                         + ([(64, 2, torch.bfloat16)] if DEVICE == "cuda" else []))
def test_the_rope_kernel_rotates_q_and_k_of_the_product_as_transformers_does(d, cos_batch, dtype):
    """rope_qk against transformers' RoPE in float64, on rows that fill no whole program; v is
    left to the product's output."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(0)
    b, t, heads = 2, 40, (4, 2, 2)
    qkv = torch.randn(b * t, sum(heads) * d, device=DEVICE).to(dtype)
    cos, sin = (x.to(dtype) for x in _rope_inputs(t, d, cos_batch))
    assert stores_right(qkv) == (DEVICE == "cuda" or dtype != torch.bfloat16)
    q, k = f8l.rope_qk(qkv, cos, sin, b, heads)
    q64, k64, _ = qkv.double().view(b, t, sum(heads), d).split(heads, dim=2)
    want = apply_rotary_pos_emb(q64, k64, cos.double(), sin.double(), unsqueeze_dim=2)
    assert q.shape == (b, t, 4, d) and k.shape == (b, t, 2, d) and q.dtype == k.dtype == dtype
    for got, ref in zip((q, k), want, strict=True):
        assert rel_err(got, ref) < {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]


def test_rope_inside_the_qkv_product_trains_as_rope_after_it():
    """The same float8 products either way: the forward is the same to the bit (RoPE as
    transformers writes it both times), the gradients differ only where RoPE's backward rounded them
    to bf16 before their float8 cast."""
    models = [_layer(torch.bfloat16) for _ in range(2)]
    for model, inside in zip(models, (False, True), strict=True):
        hf_llama.float8_layers(model, attention=True)
        model.model.layers[0].self_attn.rope_in_product = inside
        model.model.layers[0].self_attn.rope_kernel = False
    ids = torch.randint(0, models[0].config.vocab_size, (2, 32), device=DEVICE)
    losses = [model(input_ids=ids, labels=ids).loss for model in models]
    for loss in losses:
        loss.backward()
    assert losses[0].item() == losses[1].item()
    attns = [model.model.layers[0].self_attn for model in models]
    for name in ("q_proj", "k_proj", "v_proj"):
        apart, inside = (getattr(attn, name).weight.grad for attn in attns)
        assert rel_err(inside, apart) < 0.05, name
    amax = [attn.float8_qkv.now[f8l.GRAD] for attn in attns]  # of the stacked gradient's cast
    assert amax[1] > 0 and abs(amax[1] - amax[0]) <= 0.01 * amax[0]


def _layer(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    model = hf_llama.build_model(hf_llama.load_config("tiny", layers=1), dtype, torch.device(DEVICE))
    hf_llama.set_attention(model, hf_llama.attention_name("MATH", expand_kv=False))
    return model


def test_a_layer_with_float8_projections_follows_float64():
    ref, fp8 = _layer(torch.float64), _layer(torch.bfloat16)
    hf_llama.float8_layers(fp8, attention=True)
    attn = fp8.model.layers[0].self_attn
    assert attn.q_proj.weight is fp8.get_parameter("model.layers.0.self_attn.q_proj.weight")
    ids = torch.randint(0, ref.config.vocab_size, (2, 32), device=DEVICE)
    ref(input_ids=ids, labels=ids).loss.backward()
    for _ in range(2):
        fp8.zero_grad()
        loss = fp8(input_ids=ids, labels=ids).loss
        loss.backward()
        assert abs(loss.item() - ref(input_ids=ids, labels=ids).loss.item()) < 0.02
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            got = getattr(attn, name).weight.grad
            want = getattr(ref.model.layers[0].self_attn, name).weight.grad
            assert rel_err(got, want) < BOUNDS[1], name
    assert all(attn.float8_qkv.calibrated) and all(attn.float8_o.calibrated)


def test_heads_the_rope_gradient_cast_does_not_take_leave_rope_after_the_product():
    torch.manual_seed(0)
    cfg = hf_llama.load_config("tiny", layers=1)
    cfg.head_dim = 24  # 4 x 24 query and 2 x 24 key and value features: multiples of 16 for float8
    model = hf_llama.build_model(cfg, torch.bfloat16, torch.device(DEVICE))
    hf_llama.set_attention(model, hf_llama.attention_name("MATH", expand_kv=False))
    hf_llama.float8_layers(model, attention=True)
    attn = model.model.layers[0].self_attn
    assert hf_llama.ROPE_IN_QKV_PRODUCT and not attn.rope_in_product
    ids = torch.randint(0, cfg.vocab_size, (2, 32), device=DEVICE)
    model(input_ids=ids, labels=ids).loss.backward()
    assert attn.q_proj.weight.grad.abs().sum() > 0
    grads = [torch.zeros(2, 16, 4, 24, device=DEVICE).bfloat16()] + [torch.zeros(2, 16, 2, 24, device=DEVICE)
                                                                     .bfloat16()] * 2
    cos_sin = [torch.ones(1, 16, 24, device=DEVICE).bfloat16()] * 2
    with pytest.raises(ValueError, match="power-of-two dimension of at least 16, not 24"):
        f8l._qkv_rope_grad_op(*grads, *cos_sin, *linear_state(attn.q_proj.weight).tensors())


@pytest.mark.parametrize("rope_in_product", [False, True])
def test_a_compiled_llama_layer_with_float8_projections_is_one_graph(rope_in_product):
    """The patched attention forward is traced with the rest of its decoder layer: a graph break
    there (torch 2.11 broke at an import from transformers inside it) ran the attention block
    eagerly, copying q, k and v between the pieces of the layer's graph in every backward."""
    from torch._dynamo.utils import counters

    fp8 = _layer(torch.float32)
    hf_llama.float8_layers(fp8, attention=True)
    fp8.model.layers[0].self_attn.rope_in_product = rope_in_product
    counters.clear()
    torch._dynamo.reset()
    fp8.model.layers[0].compile()
    ids = torch.randint(0, fp8.config.vocab_size, (2, 32), device=DEVICE)
    fp8(input_ids=ids, labels=ids).loss.backward()
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1
    assert fp8.model.layers[0].self_attn.q_proj.weight.grad is not None


def test_trainperf_mlp_leaves_the_projections_in_bf16():
    model = _layer(torch.bfloat16)
    hf_llama.float8_layers(model, attention=False)
    attn = model.model.layers[0].self_attn
    assert not hasattr(attn, "float8_qkv") and type(model.model.layers[0].mlp).__name__ == "Float8SwiGLUMLP"


def test_float8_projections_refuse_biases_and_a_kv_cache():
    model = _layer(torch.bfloat16)
    attn = model.model.layers[0].self_attn
    attn.q_proj.bias = torch.nn.Parameter(torch.zeros(attn.q_proj.out_features, device=DEVICE))
    with pytest.raises(Unsupported, match="without biases"):
        hf_llama.float8_attention(model)
    attn.q_proj.bias = None
    hf_llama.float8_attention(model)
    x = torch.randn(1, 16, model.config.hidden_size, device=DEVICE).bfloat16()
    cos_sin = model.model.rotary_emb(x, torch.arange(16, device=DEVICE)[None])
    with pytest.raises(Unsupported, match="no KV cache"):
        attn(x, position_embeddings=cos_sin, cache=object())


def test_a_gpt_block_with_float8_products_follows_float64():
    from trainperf.models.lm import Block, LMConfig, float8_blocks

    cfg = LMConfig(vocab_size=64, context_length=32, d_model=64, d_ff=256, n_layers=1, n_heads=4,
                   attention="naive")
    torch.manual_seed(0)
    ref = Block(cfg).to(DEVICE, torch.float64)
    fp8 = Block(cfg).to(DEVICE, torch.bfloat16)
    fp8.load_state_dict(ref.state_dict())
    float8_blocks(fp8)
    x = torch.randn(2, 32, 64, device=DEVICE, dtype=torch.float64)
    dy = torch.randn_like(x)
    ref(x).backward(dy)
    for _ in range(2):
        fp8.zero_grad()
        y = fp8(x.bfloat16())
        y.backward(dy.bfloat16())
        assert rel_err(y - x, ref(x) - x) < BOUNDS[0]  # the block's update to its input
        for name, p in fp8.named_parameters():
            if p.ndim == 2:  # every matrix product's weight
                assert rel_err(p.grad, ref.get_parameter(name).grad) < BOUNDS[1], name
    assert all(fp8.mlp.float8.calibrated) and all(s.calibrated[0] for s in fp8.attn.float8)
    assert fp8.attn.rope_in_product  # a head of 16 is one the RoPE-gradient cast takes


def test_a_gpt_block_rotates_inside_the_float8_product_as_after_it():
    """With RoPE inside the float8 q, k and v product the GPT block's forward and gradients are the
    ones with RoPE after the product, up to where each rounds: in float32 on the CPU; on the GPU
    the kernel writes q and k in the product's bf16, where RoPE after it rotates in float32, and
    that moves which way the e5m2 gradients round, so the gradients agree within float8's bound."""
    from trainperf.models.lm import Block, LMConfig, float8_blocks

    cfg = LMConfig(vocab_size=64, context_length=32, d_model=64, d_ff=256, n_layers=1, n_heads=4,
                   attention="naive")
    torch.manual_seed(0)
    blocks = [Block(cfg).to(DEVICE) for _ in range(2)]
    blocks[1].load_state_dict(blocks[0].state_dict())
    for block in blocks:
        float8_blocks(block)
    blocks[1].attn.rope_in_product = False
    x = torch.randn(2, 32, 64, device=DEVICE)
    dy = torch.randn_like(x)
    ys = []
    for block in blocks:
        y = block(x)
        y.backward(dy)
        ys.append(y)
    bounds = (1e-2, BOUNDS[1]) if DEVICE == "cuda" else (1e-5, 1e-3)  # (output, gradients)
    assert rel_err(ys[0], ys[1]) < bounds[0]
    for (name, p), q in zip(blocks[0].named_parameters(), blocks[1].parameters(), strict=True):
        assert rel_err(p.grad, q.grad) < bounds[1], name


@pytest.mark.parametrize("checkpoint", ["full", "full+attn"])
def test_checkpointed_float8_layers_compile_whole_and_train_as_eager_ones(checkpoint):
    """The float8 casts are operators torch.compile traces: a checkpointed layer keeps no graph
    break (which would run it eagerly), and its losses, gradients and scales are the eager ones'
    (in float32 between the products: in bf16 compiled and eager round differently, and float8's
    coarse steps make that a few percent of a gradient)."""
    from torch._dynamo.utils import counters

    from trainperf.models.lm import LMConfig, TransformerLM, float8_blocks
    from trainperf.workloads.sharded import apply_checkpointing

    cfg = LMConfig(vocab_size=64, context_length=32, d_model=64, d_ff=256, n_layers=2, n_heads=4)
    models = []
    for compiled in (False, True):
        torch.manual_seed(0)
        with torch.device(DEVICE):
            lm = TransformerLM(cfg)
        lm.bind_attention(torch.device(DEVICE))
        float8_blocks(lm)
        apply_checkpointing(lm.layers, checkpoint)
        if compiled:
            counters.clear()
            lm.compile_layers()
        models.append(lm)
    tokens = torch.randint(0, 64, (2, 32), device=DEVICE)
    for _ in range(3):  # calibrating, then on the scales of earlier steps
        losses = []
        for lm in models:
            lm.zero_grad()
            loss = lm(tokens).float().logsumexp(-1).mean()
            loss.backward()
            losses.append(loss)
        torch.testing.assert_close(losses[1], losses[0], rtol=EXACT[0], atol=0)
        for (name, p), q in zip(models[0].named_parameters(), models[1].parameters(), strict=True):
            assert rel_err(q.grad, p.grad) < EXACT[1], name
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1
    states = [[s for m in lm.modules() if getattr(m, "float8", None) is not None
               for s in (m.float8 if isinstance(m.float8, tuple) else (m.float8,))] for lm in models]
    from trainperf.kernels import float8_mlp as f8

    for eager, compiled in zip(*states, strict=True):
        used = compiled.calibrated.clone()
        if used.numel() == f8.ROLES:  # a checkpointed MLP keeps its gate and up product in bf16
            assert not compiled.gate_up_in_float8 and not used[f8.GU]
            used[f8.GU] = True
        assert bool(used.all())
        # the scales; not the histories: where a compiled step keeps a cast for the backward instead
        # of recomputing it, its amax enters the history once a step instead of twice
        torch.testing.assert_close(compiled.scale, eager.scale, rtol=EXACT[0], atol=0)
