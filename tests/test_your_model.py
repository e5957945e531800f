"""Any model: transformers configs of several families and a user's own nn.Module, through the CLI
and the Python API; its blocks found, its FLOPs counted."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from typer.testing import CliRunner

import trainperf
from trainperf.cli import app
from trainperf.core.flops import counted_flops, transformer_flops
from trainperf.core.store import Store
from trainperf.models.source import ModelSource, find_blocks

runner = CliRunner()
SMALL = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
FAMILIES = {
    "qwen2": SMALL,
    "mistral": SMALL,
    "gemma2": {**SMALL, "head_dim": 8},
    "phi3": SMALL,
    "gpt2": dict(
        vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2
    ),  # LayerNorm, GELU, learned positions
}
BLOCKS = {
    "qwen2": "model.layers",
    "mistral": "model.layers",
    "gemma2": "model.layers",
    "phi3": "model.layers",
    "gpt2": "transformer.h",
}

# A user's model in a file of its own: pre-norm blocks of PyTorch's MultiheadAttention and a GELU MLP.
USER_MODEL = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(x)


class TinyLM(nn.Module):
    def __init__(self, vocab=96, d=32, layers=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make():
    return TinyLM()
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> the --model value: a config.json per family, and the user's file."""
    from transformers import AutoConfig

    folder = tmp_path_factory.mktemp("models")
    named = {}
    for family, kw in FAMILIES.items():
        path = folder / f"{family}.json"
        AutoConfig.for_model(family, **kw).to_json_file(str(path))
        named[family] = str(path)
    (folder / "user_lm.py").write_text(textwrap.dedent(USER_MODEL))
    named["user"] = f"py:{folder / 'user_lm.py'}:make"
    return named


def test_every_family_and_the_user_s_module_steps_with_mfu_and_its_blocks(models, tmp_path):
    db = tmp_path / "r.db"
    res = runner.invoke(
        app,
        [
            "step",
            "--model",
            ",".join(models.values()),
            "--seq",
            "16",
            "--batch",
            "2",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--peak-tflops",
            "1",
            "--db",
            str(db),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    rows = {r.spec["model"]: r for r in Store(db).records()}
    for name, model in models.items():
        r = rows[model]
        assert r.status == "ok", (name, r.reason)
        assert r.metrics["flops_source"] == "counted" and r.metrics["mfu"] > 0
        assert r.metrics["tflops"] == pytest.approx(r.metrics["mfu"])  # over a peak of 1 TFLOP/s
        expected = BLOCKS.get(name, "blocks")
        assert r.metrics["blocks_found"].startswith(f"{expected} ("), r.metrics["blocks_found"]


@pytest.mark.parametrize("family", [*FAMILIES, "user"])
def test_profile_and_memory_of_any_model_have_per_layer_ranges(models, tmp_path, family):
    out = tmp_path / "o"
    res = runner.invoke(
        app, ["profile", "step", "--model", models[family], "--seq", "16", "--out", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    ranges = {r["range"] for r in json.loads(res.output)["ranges"]}
    assert any(r.startswith("fwd.layer") for r in ranges), sorted(ranges)
    res = runner.invoke(app, ["memory", "step", "--model", models[family], "--seq", "16", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert ".layer." in res.output  # the largest allocations, by the block that made them


BROKEN_MODEL = """
import torch
from torch import nn


class Broken(nn.Module):
    def __init__(self, vocab=96, d=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        torch._dynamo.graph_break()
        return self.head(x)


def make():
    return Broken()
"""


def test_a_profile_of_a_model_compiled_in_pieces_says_where_the_graph_broke(tmp_path):
    (tmp_path / "broken.py").write_text(textwrap.dedent(BROKEN_MODEL))
    out = tmp_path / "o"
    model = f"py:{tmp_path / 'broken.py'}:make"
    res = runner.invoke(app, ["profile", "step", "--model", model, "--seq", "16", "--compile", "on",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "note: 1 graph break(s) in compiled code (\"Call to `torch._dynamo.graph_break()`\")" in res.output
    (saved,) = out.glob("profile_*.json")
    assert json.loads(saved.read_text())["meta"]["notes"][0].startswith("1 graph break(s)")


def test_a_compiled_model_compiles_its_blocks(models, tmp_path):
    db = tmp_path / "r.db"
    res = runner.invoke(
        app,
        [
            "step",
            "--model",
            models["user"],
            "--seq",
            "16",
            "--batch",
            "2",
            "--compile",
            "on",
            "--iters",
            "1",
            "--warmup",
            "1",
            "--db",
            str(db),
            "--out",
            str(tmp_path),
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    (record,) = Store(db).records()
    assert record.status == "ok" and record.spec["compile"] is True, record.reason


def test_named_blocks_and_a_model_with_none(models, tmp_path):
    source = ModelSource(models["user"])
    model = source.build(torch.device("cpu"))
    assert find_blocks(model).path == "blocks"
    assert find_blocks(model, "blocks").describe() == "blocks (3 x Block)"
    flat = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10))
    assert find_blocks(flat) is None
    record = trainperf.measure_step(flat, batch=(2, 8), iters=1, warmup=0)
    assert record.status == "ok" and record.metrics["blocks_found"].startswith("none found")


@pytest.mark.parametrize(
    "model, says",
    [
        ("py:nowhere.py:make", "no such file 'nowhere.py'"),
        ("py:json:nothing", "json has no callable 'nothing'"),
        ("py:no_such_module_here:make", "importing no_such_module_here failed: ModuleNotFoundError"),
        ("py:justone", "expected py:<module or file.py>:<factory>"),
        ("missing.json", "no such file"),
        ("nothing-at-all", "unknown --model 'nothing-at-all'; valid choices: tiny, small"),
    ],
)
def test_a_model_name_that_gives_no_model_is_one_line(tmp_path, model, says):
    res = runner.invoke(
        app, ["step", "--model", model, "--db", str(tmp_path / "r.db"), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and says in " ".join(res.output.split()), res.output
    assert not (tmp_path / "r.db").exists()


def test_gpt_options_are_refused_for_a_model_built_as_it_is(models, tmp_path):
    res = runner.invoke(
        app, ["step", "--model", models["qwen2"], "--norm", "fused", "--db", str(tmp_path / "r.db")]
    )
    assert res.exit_code == 2 and "--norm change the GPT LM presets" in res.output
    res = runner.invoke(
        app, ["step", "--model", "tiny", "--blocks", "layers", "--db", str(tmp_path / "r.db")]
    )
    assert res.exit_code == 2 and "--blocks" in res.output
    res = runner.invoke(
        app,
        [
            "step",
            "--model",
            models["user"],
            "--blocks",
            "head",
            "--seq",
            "16",
            "--db",
            str(tmp_path / "r.db"),
            "--out",
            str(tmp_path / "o"),
            "--quiet",
        ],
    )
    assert res.exit_code == 0  # a case that cannot run is its record
    (record,) = Store(tmp_path / "r.db").records()
    assert (
        record.status == "error" and "blocks 'head' is a Linear, not a non-empty ModuleList" in record.reason
    )


def test_counted_flops_agree_with_the_analytic_count_on_the_presets_and_llama():
    """PyTorch's flop counter against 6·N·tokens + attention (attention is small at this length:
    the counter counts it whole where the causal formula halves it)."""
    from trainperf.models.lm import TransformerLM, lm_loss
    from trainperf.workloads.step import StepSpec

    spec = StepSpec.from_preset(
        "small",
        seq=64,
        batch=2,
        dtype="fp32",
        compile=False,
        mode="train",
        device="cpu",
        d_model=None,
        d_ff=None,
        layers=None,
        heads=None,
    )
    model = TransformerLM(spec.model_config())
    ids = torch.randint(0, spec.vocab, (2, 65))
    counted = counted_flops(lambda: lm_loss(model(ids[:, :-1]), ids[:, 1:]).backward())
    analytic = transformer_flops(model.matmul_params(), spec.layers, spec.d_model, 64, 128)
    assert counted == pytest.approx(analytic, rel=0.05)

    from trainperf.models.hf_llama import build_model, load_config

    cfg = load_config("tiny")
    llama = build_model(cfg, torch.float32, torch.device("cpu"))
    ids = torch.randint(0, cfg.vocab_size, (2, 33))
    counted = counted_flops(lambda: lm_loss(llama(ids[:, :-1]).logits, ids[:, 1:]).backward())
    matmul = sum(m.weight.numel() for m in llama.modules() if isinstance(m, torch.nn.Linear))
    analytic = transformer_flops(
        matmul, cfg.num_hidden_layers, cfg.num_attention_heads * cfg.head_dim, 32, 64
    )
    assert counted == pytest.approx(analytic, rel=0.05)


def test_the_python_api_as_a_user_calls_it(models, tmp_path):
    """A notebook's loop: a model object, a batch function of one's own, an optimizer of one's own,
    the record into a store, a DataFrame, a profile."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("user_lm", models["user"].split(":")[1])
    user_lm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user_lm)
    model = user_lm.TinyLM(vocab=96)

    def batch():
        ids = torch.randint(0, 96, (3, 17))
        return ids[:, :-1], ids[:, 1:]

    record = trainperf.measure_step(
        model,
        batch,
        optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1),
        iters=2,
        warmup=1,
        peak_tflops=1.0,
        db=tmp_path / "r.db",
    )
    assert record.status == "ok", record.reason
    assert (record.spec["batch"], record.spec["seq"]) == (3, 16)
    assert record.metrics["step_ms_median"] > 0 and record.metrics["mfu"] > 0
    assert Store(tmp_path / "r.db").records()[0].metrics == record.metrics
    frame = trainperf.to_frame([record])
    assert frame.loc[0, "model"] == "TinyLM (a Python object)" and frame.loc[0, "status"] == "ok"
    breakdown = trainperf.profile_step(model, batch=(2, 16))
    assert {"fwd.layer", "bwd.layer"} <= {
        r.split(".attn")[0].split(".mlp")[0] for r in breakdown.ranges["range"]
    }
    with pytest.raises(TypeError, match="batch must be"):
        trainperf.measure_step(model, batch=[2, 16])
    assert dir(trainperf) == sorted(trainperf.__all__)  # what a notebook's completion offers


def test_attention_with_grouped_kv_heads_counts_as_the_query_s_heads_on_the_cpu_too():
    """The flop counter of torch < 2.12 refuses grouped K/V shapes, and none counts the CPU's fused
    attention: both count here as the same attention with K/V repeated to the query's heads."""
    import torch.nn.functional as F

    q = torch.randn(2, 8, 64, 16, requires_grad=True)
    k, v = (torch.randn(2, 2, 64, 16, requires_grad=True) for _ in range(2))
    grouped = counted_flops(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True).sum().backward())
    kk, vv = (t.detach().repeat_interleave(4, 1).requires_grad_() for t in (k, v))
    repeated = counted_flops(lambda: F.scaled_dot_product_attention(q, kk, vv).sum().backward())
    forward = 2 * (2 * 2 * 8 * 64 * 64 * 16)  # QK^T and PV
    assert grouped == repeated and grouped >= 3 * forward


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_python_api_on_a_gpu_compiled_in_bf16(models):
    """A user's module on the GPU: bf16 by default, compiled per block, MFU against the datasheet peak."""
    model = ModelSource(models["user"]).build(torch.device("cuda"))
    record = trainperf.measure_step(model, batch=(8, 256), compile=True, iters=5, warmup=2)
    assert record.status == "ok", record.reason
    assert record.spec["dtype"] == "bf16" and record.spec["device"].startswith("cuda")
    assert 0 < record.metrics["mfu"] < 1 and record.metrics["peak_mem_gb"] > 0
    assert record.metrics["blocks_found"] == "blocks (3 x Block)"


def test_every_family_and_the_user_s_module_shard_over_two_ranks_with_mfu(models, tmp_path):
    """FSDP2 over the found blocks (each checkpointed) and DDP, gloo on two CPU processes."""
    db = tmp_path / "r.db"
    res = runner.invoke(
        app,
        ["shard", "--model", ",".join(models.values()), "--world-size", "2", "--shard", "full,none",
         "--checkpoint", "full", "--seq", "16", "--batch", "4", "--iters", "2", "--warmup", "1",
         "--peak-tflops", "1", "--db", str(db), "--out", str(tmp_path / "o"), "--quiet"],
    )
    assert res.exit_code == 0, res.output
    records = Store(db).records()
    assert len(records) == 2 * len(models)
    for r in records:
        name = next(n for n, m in models.items() if m == r.spec["model"])
        assert r.status == "ok", (name, r.spec["shard"], r.reason)
        assert r.metrics["flops_source"] == "counted (forward x 3)" and r.metrics["mfu"] > 0
        assert r.metrics["tflops"] / 2 == pytest.approx(r.metrics["mfu"])  # per rank, over 1 TFLOP/s each
        found = r.metrics["blocks_found"]
        assert found.startswith(f"{BLOCKS.get(name, 'blocks')} ("), found
    qwen = next(r for r in records if r.spec["model"] == models["qwen2"])
    tokens = 4 * 16
    analytic = transformer_flops(2 * (32 * 32 * 2 + 32 * 16 * 2 + 3 * 32 * 64) + 32 * 128, 2, 32, 16, tokens)
    assert qwen.metrics["model_tflop"] * 1e12 == pytest.approx(analytic, rel=0.15)  # attention counted whole


@pytest.mark.parametrize("option, says", [
    (["--float8", "trainperf"], "--float8 trainperf acts on the GPT LM presets"),
    (["--attention", "triton-fa2"], "--attention acts on the GPT LM presets"),
    (["--layers", "3"], "--layers must be between 1 and the model's 2, got 3"),
    (["--layers", "1", "--user"], "--layers sets a transformers config's depth"),
])
def test_shard_refuses_preset_options_for_another_model_in_one_line(models, tmp_path, option, says):
    name = "user" if "--user" in option else "qwen2"
    option = [o for o in option if o != "--user"]
    res = runner.invoke(app, ["shard", "--model", models[name], *option, "--db", str(tmp_path / "r.db")])
    assert res.exit_code == 2 and says in res.output and len(res.output.strip().splitlines()) == 1, res.output
    res = runner.invoke(app, ["shard", "--model", "tiny", "--blocks", "layers", "--db", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--blocks names a model's blocks" in res.output


def test_recipes_of_another_model_are_rows_saying_what_they_need_here(models, tmp_path):
    """On this machine Liger and torchao's float8 cannot run (no GPU, or not installed): each is an
    unsupported row naming why, beside the stock row that ran."""
    db = tmp_path / "r.db"
    res = runner.invoke(app, ["step", "--model", models["qwen2"], "--recipe", "stock,liger,float8",
                              "--seq", "16", "--batch", "2", "--iters", "1", "--warmup", "0", "--db", str(db),
                              "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 0, res.output
    rows = {r.spec["recipe"]: r for r in Store(db).records()}
    assert rows["stock"].status == "ok"
    assert rows["liger"].status == "unsupported" and "liger" in rows["liger"].reason
    assert rows["float8"].status == "unsupported" and ("torchao" in rows["float8"].reason
                                                       or "GPU" in rows["float8"].reason)
    res = runner.invoke(app, ["step", "--model", "tiny", "--recipe", "liger", "--db", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--recipe liger acts on a model given as hf:" in res.output


@pytest.mark.gpu
def test_liger_and_float8_on_another_family_run_and_liger_is_undone(models, tmp_path):
    pytest.importorskip("liger_kernel")
    pytest.importorskip("torchao")
    from transformers.models.qwen2 import modeling_qwen2

    before = dict(vars(modeling_qwen2))
    db = tmp_path / "r.db"
    res = runner.invoke(app, ["step", "--model", models["qwen2"], "--recipe", "liger,float8,stock",
                              "--seq", "64", "--batch", "2", "--dtype", "bf16", "--iters", "2",
                              "--warmup", "1", "--db", str(db), "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 0, res.output
    rows = {r.spec["recipe"]: r for r in Store(db).records()}
    for recipe, r in rows.items():
        assert r.status == "ok", (recipe, r.reason)
    assert rows["liger"].metrics["swaps"] == "liger,loss=liger-flce"  # its fused linear cross-entropy too
    assert {k: v for k, v in vars(modeling_qwen2).items() if k in before} == before


def test_ddp_trains_another_model_per_sync_variant_over_two_ranks(models, tmp_path):
    db = tmp_path / "r.db"
    res = runner.invoke(app, ["ddp", "--model", models["user"], "--world-size", "2",
                              "--variant", "bucketed,ddp,fsdp2", "--seq", "16", "--batch", "2",
                              "--iters", "2", "--warmup", "1", "--db", str(db), "--out", str(tmp_path / "o"),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    records = Store(db).records()
    assert {r.spec["variant"] for r in records} == {"bucketed", "ddp", "fsdp2"}
    for r in records:
        assert r.status == "ok" and r.metrics["step_ms_median"] > 0, (r.spec["variant"], r.reason)
    res = runner.invoke(app, ["ddp", "--model", "tiny", "--blocks", "layers", "--db", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--blocks names a model's blocks" in res.output


def assert_same_loss_and_gradients(stock, ours, loss) -> None:
    """`loss(ids, targets)` on `ours` (stock's weights, a part swapped) gives stock's loss and
    every gradient of stock's, on one batch of token ids."""
    from trainperf.models.lm import lm_loss

    ids = torch.randint(0, 128, (2, 17))
    losses = [lm_loss(stock(ids[:, :-1]).logits, ids[:, 1:]), loss(ids[:, :-1], ids[:, 1:])]
    for value in losses:
        value.backward()
    assert losses[1].item() == pytest.approx(losses[0].item(), rel=1e-5)
    for (name, a), b in zip(stock.named_parameters(), ours.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-6), name


def test_trainperf_recipe_swaps_the_rmsnorms_it_reproduces_and_keeps_the_gradients(models):
    """trainperf's Triton RMSNorm replaces Qwen2's five (two a layer and the final one); the loss
    and every gradient stay those of the model as transformers builds it (fp32, Triton's interpreter
    on the CPU). Gemma 2's RMSNorm scales by 1 + weight: none is swapped, and the recipe says so."""
    from trainperf.core.errors import Unsupported
    from trainperf.models.lm import lm_loss
    from trainperf.models.norms import TritonRMSNorm
    from trainperf.models.peers import swap_rmsnorms

    source = ModelSource(models["qwen2"])
    stock, swapped = source.build(torch.device("cpu")), source.build(torch.device("cpu"))
    swapped.load_state_dict(stock.state_dict())
    assert swap_rmsnorms(swapped) == 5
    assert sum(isinstance(m, TritonRMSNorm) for m in swapped.modules()) == 5
    assert_same_loss_and_gradients(stock, swapped, lambda ids, targets: lm_loss(swapped(ids).logits, targets))
    with pytest.raises(Unsupported, match="Gemma's scales by 1 \\+ weight"):
        swap_rmsnorms(ModelSource(models["gemma2"]).build(torch.device("cpu")))


@pytest.mark.parametrize("name", ["user", "qwen2"])
def test_parity_trains_another_model_s_recipe_from_stock_s_weights_and_batches(models, tmp_path, name):
    db = tmp_path / "r.db"
    res = runner.invoke(app, ["parity", "--model", models[name], "--recipe", "compile", "--train-steps", "12",
                              "--batch", "2", "--seq", "16", "--dtype", "fp32", "--stock-seeds", "2",
                              "--db", str(db), "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 0, res.output
    runs = {(r.spec["recipe"], r.spec["seed"]): r for r in Store(db).records()}
    assert set(runs) == {("stock", 0), ("compile", 0), ("stock", 1)}
    assert all(r.status == "ok" for r in runs.values()), [r.reason for r in runs.values()]
    stock, compiled, other = runs["stock", 0], runs["compile", 0], runs["stock", 1]
    curve = [float(x) for x in stock.metrics["loss_curve"].split(",")]
    assert len(curve) == 12 and curve[-1] < curve[0]  # it learns the task
    assert compiled.metrics["loss_first"] == pytest.approx(stock.metrics["loss_first"], rel=1e-5)
    assert other.metrics["loss_first"] != pytest.approx(stock.metrics["loss_first"], rel=1e-5)
    assert compiled.metrics["swaps"] == "compile" and stock.spec["sdpa_backend"] == "own"
    assert "compile" in (tmp_path / "o" / "parity_band.csv").read_text()


@pytest.mark.parametrize("command, name, extra, says", [
    ("parity", "qwen2", ["--recipe", "fast"],
     "--recipe: unknown value 'fast'; valid choices: stock, compile, liger, float8, trainperf"),
    ("parity", "user", ["--layers", "1"], "--layers sets a transformers config's depth"),
    ("parity", "user", ["--sdpa-backend", "MATH"], "--sdpa-backend picks a Llama's attention"),
    ("llama", "user", [], "swaps parts of a transformers Llama; your own nn.Module goes through"),
])
def test_a_command_that_cannot_take_a_model_says_so_in_one_line(models, tmp_path, command, name, extra, says):
    res = runner.invoke(app, [command, "--model", models[name], *extra, "--db", str(tmp_path / "r.db"),
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and says in " ".join(res.output.split()), res.output
    assert not (tmp_path / "r.db").exists()


def test_the_llama_commands_take_a_preset_named_as_hf_too():
    from trainperf.models.hf_llama import load_config

    assert load_config("hf:tiny").to_dict() == load_config("tiny").to_dict()


def test_trainperf_recipe_takes_the_loss_from_the_hidden_states_where_it_is_the_model_s_own(models):
    """Through trainperf's chunked loss Qwen2's loss and every gradient are the model's own (fp32);
    Gemma 2's soft-capped logits and a module without a decoder are refused, saying why; the
    check leaves the model as it was."""
    from trainperf.core.errors import Unsupported
    from trainperf.models.head_loss import chunked_head_loss

    source = ModelSource(models["qwen2"])
    stock, ours = source.build(torch.device("cpu")), source.build(torch.device("cpu"))
    ours.load_state_dict(stock.state_dict())
    loss = chunked_head_loss(ours)
    assert ours.training
    for (name, a), b in zip(stock.state_dict().items(), ours.state_dict().values(), strict=True):
        assert torch.equal(a, b), name  # the check scaled the head and put it back exactly
    assert_same_loss_and_gradients(stock, ours, loss)
    with pytest.raises(Unsupported, match="soft-capped"):
        chunked_head_loss(ModelSource(models["gemma2"]).build(torch.device("cpu")))
    with pytest.raises(Unsupported, match="get_decoder"):
        chunked_head_loss(ModelSource(models["user"]).build(torch.device("cpu")))


def test_the_trainperf_recipe_row_says_what_it_swapped_or_why_nothing(models, tmp_path):
    db = tmp_path / "r.db"
    both = f"{models['qwen2']},{models['user']}"
    res = runner.invoke(app, ["step", "--model", both, "--recipe", "trainperf", "--seq", "16", "--batch", "2",
                              "--iters", "1", "--warmup", "0", "--db", str(db),
                              "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 0, res.output
    rows = {r.spec["model"]: r for r in Store(db).records()}
    qwen, user = rows[models["qwen2"]], rows[models["user"]]
    assert qwen.status == "ok" and qwen.metrics["swaps"].startswith("loss=chunked"), qwen.reason
    assert user.status == "unsupported" and "get_decoder" in user.reason


def _sharded_losses(rank, world, cases, out_path):
    """Per case: the global loss of each of three steps, and the parameters after them."""
    import torch.distributed as dist

    from trainperf.workloads.sharded import ShardedStep

    results = {}
    for name, s in cases:
        step = ShardedStep(s, rank, world, torch.device("cpu"))
        losses = []
        for _ in range(3):
            loss = step().detach()
            dist.all_reduce(loss)
            losses.append(loss.item() / world)
        full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in step.model.parameters()]
        results[name] = (losses, torch.cat([p.detach().flatten() for p in full]))
    if rank == 0:
        torch.save(results, out_path)


def test_shard_takes_trainperf_s_chunked_loss_for_another_model_and_trains_the_same(models, tmp_path):
    """FSDP2 over two gloo ranks: Qwen2 with the loss from its hidden states (trainperf's chunked
    loss inside the sharded root) trains step by step as with its own logits; Gemma 2's
    soft-capped logits make the chunked case an unsupported row saying why."""
    from trainperf.distributed.launch import launch
    from trainperf.workloads.sharded import ShardSpec

    base = dict(model=models["qwen2"], world_size=2, shard="full", checkpoint="none", seq=16, batch=4,
                dtype="fp32", dist_backend="gloo", warmup=0, iters=1, lr=1e-2)
    cases = [(loss, ShardSpec(**base, loss=loss)) for loss in ("torch", "chunked")]
    out = tmp_path / "r.pt"
    launch(_sharded_losses, 2, "gloo", args=(cases, str(out)))
    results = torch.load(out)
    assert results["chunked"][0] == pytest.approx(results["torch"][0], rel=1e-5)
    torch.testing.assert_close(results["chunked"][1], results["torch"][1], rtol=1e-4, atol=1e-4)
    db = tmp_path / "r.db"
    res = runner.invoke(app, ["shard", "--model", models["gemma2"], "--world-size", "2", "--loss", "chunked",
                              "--seq", "16", "--batch", "4", "--iters", "1", "--warmup", "0", "--db", str(db),
                              "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 0, res.output
    [row] = Store(db).records()
    assert row.status == "unsupported" and "soft-capped" in row.reason, row.reason
