"""The sharded training step on the CPU with gloo: every sharding and checkpointing choice trains
exactly as one process does on the same global batch; the CLI records it; bad input is refused."""

import json
from dataclasses import replace

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.errors import SpecError
from trainperf.core.store import Store
from trainperf.distributed.launch import launch
from trainperf.models.lm import TransformerLM
from trainperf.workloads.sharded import (
    LMWithLoss,
    ShardedStep,
    ShardSpec,
    apply_checkpointing,
    flop_counts,
    global_batch_tokens,
    validate,
)

runner = CliRunner()
STEPS = 2


def spec(**kw):
    base = dict(model="tiny", world_size=2, shard="full", checkpoint="none", seq=16, batch=4, dtype="fp32",
                dist_backend="gloo", vocab=64, warmup=0, iters=1, lr=1e-2)
    return ShardSpec(**{**base, **kw})


def single_process(s: ShardSpec) -> tuple[list[float], torch.Tensor]:
    """Losses and final parameters of AdamW on the whole global batch in one process."""
    torch.manual_seed(0)
    model = LMWithLoss(TransformerLM(s.model_config()), s.loss)
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr)
    rows = global_batch_tokens(s)
    losses = []
    for _ in range(STEPS):
        loss = model(rows[:, :-1], rows[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, torch.cat([p.detach().flatten() for p in model.parameters()])


def _train(rank, world, cases, out_path):
    import torch.distributed as dist

    results = {}
    for name, s in cases:
        step = ShardedStep(s, rank, world, torch.device("cpu"))
        losses = []
        for _ in range(STEPS):
            loss = step().detach()
            dist.all_reduce(loss)  # each rank's loss is over its slice: their mean is the global one
            losses.append(loss.item() / world)
        full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in step.model.parameters()]
        results[name] = (losses, torch.cat([p.detach().flatten() for p in full]))
    if rank == 0:
        torch.save(results, out_path)


@pytest.mark.parametrize("world, cases", [
    (2, [("full", "none"), ("full", "full"), ("full", "every-2"), ("full", "ops"), ("full", "full+attn"),
         ("hybrid", "none"), ("none", "none"), ("none", "full")]),
    (4, [("hybrid", "every-2"), ("full", "ops")]),
])
def test_every_sharding_and_checkpointing_matches_one_process(tmp_path, world, cases):
    specs = [(f"{sh}/{ck}", spec(shard=sh, checkpoint=ck, world_size=world)) for sh, ck in cases]
    out = tmp_path / "r.pt"
    launch(_train, world, "gloo", args=(specs, str(out)))
    results = torch.load(out)
    ref_losses, ref_params = single_process(specs[0][1])
    for name, (losses, params) in results.items():
        assert losses == pytest.approx(ref_losses, rel=1e-5), name
        # AdamW divides by the gradients' RMS: float32 reduction order moves weights by < 1% of lr
        torch.testing.assert_close(params, ref_params, rtol=1e-4, atol=1e-4, msg=name)


def _gradients_are_bf16_values(rank, world, cases, out_path):
    """Per case: whether every gradient element this rank holds after one backward is a bf16 value."""
    results = {}
    for name, s in cases:
        step = ShardedStep(s, rank, world, torch.device("cpu"))
        step.model(step.x, step.y).backward()
        grads = [p.grad for p in step.model.parameters()]
        flat = torch.cat([(g.to_local() if hasattr(g, "to_local") else g).flatten() for g in grads])
        results[name] = bool(torch.equal(flat, flat.bfloat16().float())) and flat.abs().sum().item() > 0
    if rank == 0:
        torch.save(results, out_path)


def test_fsdp2_reduces_gradients_in_bf16_when_asked_and_in_fp32_otherwise(tmp_path):
    specs = [(d, spec(shard="full", reduce_dtype=d)) for d in ("fp32", "bf16")]
    out = tmp_path / "r.pt"
    launch(_gradients_are_bf16_values, 2, "gloo", args=(specs, str(out)))
    assert torch.load(out) == {"fp32": False, "bf16": True}


def _decoder_gradients(rank, world, cases, out_path):
    """Per case: the whole gradient of the decoder's matrix weights after one backward."""
    results = {}
    for name, s in cases:
        step = ShardedStep(s, rank, world, torch.device("cpu"))
        step.model(step.x, step.y).backward()
        results[name] = _matrix_gradients(step.model)
    if rank == 0:
        torch.save(results, out_path)


def _matrix_gradients(model: torch.nn.Module) -> torch.Tensor:
    """The decoder's matrix weights' gradients and the LM head's (tied to the embedding or not)."""
    grads = [p.grad for name, p in model.named_parameters()
             if ("layers." in name or "lm_head" in name or "embed" in name) and p.ndim == 2]
    return torch.cat([(g.full_tensor() if hasattr(g, "full_tensor") else g).flatten() for g in grads])


def test_trainperf_s_float8_shards_and_checkpoints_within_float8_of_fp32(tmp_path):
    from conftest import rel_err

    specs = [(ck, spec(shard="full", checkpoint=ck, float8="trainperf"))
             for ck in ("none", "full+attn", "ops")]
    specs.append(("the LM head too", spec(shard="full", checkpoint="full+attn", float8="trainperf-head",
                                          loss="chunked")))
    out = tmp_path / "r.pt"
    launch(_decoder_gradients, 2, "gloo", args=(specs, str(out)))
    ref = specs[0][1]
    torch.manual_seed(0)
    model = LMWithLoss(TransformerLM(ref.model_config()), ref.loss)
    rows = global_batch_tokens(ref)
    model(rows[:, :-1], rows[:, 1:]).backward()
    want = _matrix_gradients(model)
    for name, got in torch.load(out).items():
        # float8 products (e4m3, e5m2 gradients; the interpreter rounds a little more), not fp32's
        assert 1e-3 < rel_err(got, want) < 0.3, name


def test_the_float8_head_takes_the_loss_where_asked_and_needs_a_vocabulary_float8_gemms_take():
    from trainperf.core.errors import Unsupported

    s = spec(loss="chunked", float8="trainperf-head")
    torch.manual_seed(0)
    model = LMWithLoss(TransformerLM(s.model_config()), s.loss, float8_head=True)
    rows = global_batch_tokens(s)
    model(rows[:, :-1], rows[:, 1:]).backward()
    assert model.head_state.calibrated.all()  # its three tensors were cast for float8 products
    assert model.lm.lm_head.weight.grad.abs().sum() > 0
    with pytest.raises(Unsupported, match="multiple of 16, not 60"):
        LMWithLoss(TransformerLM(spec(vocab=60).model_config()), "chunked", float8_head=True)


def test_ddp_with_bf16_gradients_on_gloo_is_an_unsupported_row_naming_nccl(db, tmp_path):
    res = runner.invoke(app, ["shard", "--world-size", "2", "--shard", "none", "--reduce-dtype", "bf16",
                              "--iters", "1", "--warmup", "0", "--db", str(db), "--out", str(tmp_path),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    (rec,) = Store(db).records()
    assert rec.status == "unsupported" and "NCCL" in rec.reason and "--reduce-dtype bf16" in rec.reason


@pytest.mark.parametrize("option, field", [("--cuda-graph", "cuda_graph"),
                                           ("--expandable-segments", "expandable_segments")])
def test_a_gpu_only_choice_on_gloo_is_an_unsupported_row_beside_the_plain_step(db, tmp_path, option, field):
    res = runner.invoke(app, ["shard", "--world-size", "2", option, "off,on", "--iters", "1",
                              "--warmup", "0", "--db", str(db), "--out", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    recs = {r.spec[field]: r for r in Store(db).records()}
    assert recs[False].status == "ok"
    assert recs[True].status == "unsupported" and "CUDA" in recs[True].reason and option in recs[True].reason


def test_explicit_prefetching_and_keeping_layers_gathered_train_as_one_process(tmp_path):
    specs = [("prefetch 2", spec(shard="full", checkpoint="none", world_size=2, prefetch=2)),
             ("no reshard", spec(shard="full", checkpoint="full", world_size=2, reshard_after_forward=False)),
             ("two layers a unit", spec(shard="full", checkpoint="full", world_size=2, unit_layers=2,
                                        prefetch=1))]
    out = tmp_path / "r.pt"
    launch(_train, 2, "gloo", args=(specs, str(out)))
    ref_losses, ref_params = single_process(specs[0][1])
    for name, (losses, params) in torch.load(out).items():
        assert losses == pytest.approx(ref_losses, rel=1e-5), name
        torch.testing.assert_close(params, ref_params, rtol=1e-4, atol=1e-4, msg=name)


def _shard_fake_decoder(n_layers: int, **kw) -> tuple[list, list]:
    """What shard_decoder asks of FSDP2 for `n_layers` layers: the units it shards (layer indices,
    resharded after forward or not) and the prefetch calls of each unit's first layer."""
    from trainperf.distributed import fsdp

    calls, sharded = [], []

    class Layer(torch.nn.Linear):
        def set_modules_to_forward_prefetch(self, modules):
            calls.append(("fwd", self.i, [m.i for m in modules]))

        def set_modules_to_backward_prefetch(self, modules):
            calls.append(("bwd", self.i, [m.i for m in modules]))

    layers = [Layer(2, 2) for _ in range(n_layers)]
    for i, layer in enumerate(layers):
        layer.i = i

    class FakeFsdp:
        @staticmethod
        def fully_shard(module, reshard_after_forward, **policy):
            unit = [m.i for m in module] if isinstance(module, list) else getattr(module, "i", "root")
            sharded.append((unit, reshard_after_forward))

    original = fsdp.fsdp2
    fsdp.fsdp2 = lambda: FakeFsdp
    try:
        fsdp.shard_decoder(torch.nn.Module(), layers, **kw)
    finally:
        fsdp.fsdp2 = original
    return sharded, calls


def test_the_decoder_is_sharded_with_the_last_layer_kept_gathered_and_prefetch_chains():
    sharded, calls = _shard_fake_decoder(4, reshard_after_forward=True, prefetch=2)
    assert sharded == [(0, True), (1, True), (2, True), (3, False), ("root", False)]
    assert ("fwd", 0, [1, 2]) in calls and ("fwd", 3, []) in calls
    assert ("bwd", 3, [2, 1]) in calls and ("bwd", 0, []) in calls


def test_units_of_layers_are_sharded_together_and_prefetch_whole_units():
    sharded, calls = _shard_fake_decoder(5, reshard_after_forward=True, prefetch=1, unit_layers=2)
    assert sharded == [([0, 1], True), ([2, 3], True), (4, False), ("root", False)]
    assert sorted(calls) == [("bwd", 0, []), ("bwd", 2, [0]), ("bwd", 4, [2]),
                             ("fwd", 0, [2]), ("fwd", 2, [4]), ("fwd", 4, [])]


def test_a_torch_whose_fsdp2_takes_one_module_a_unit_gives_an_unsupported_row():
    from trainperf.core.errors import Unsupported
    from trainperf.distributed import fsdp

    class OneModuleFsdp:
        @staticmethod
        def fully_shard(module, reshard_after_forward, **policy):
            module.named_parameters()  # a list has none: AttributeError, as torch < 2.6 gives

    original = fsdp.fsdp2
    fsdp.fsdp2 = lambda: OneModuleFsdp
    try:
        with pytest.raises(Unsupported, match="--unit-layers 2"):
            fsdp.shard_decoder(torch.nn.Module(), [torch.nn.Linear(2, 2) for _ in range(4)], unit_layers=2)
    finally:
        fsdp.fsdp2 = original


def test_checkpointing_wraps_the_layers_its_policy_names():
    from trainperf.models.lm import LMConfig, TransformerLM

    for policy, wrapped in (("none", 0), ("full", 4), ("every-2", 2), ("every-3", 2), ("ops", 4),
                            ("all-but-1", 3), ("all-but-0", 4)):
        lm = TransformerLM(LMConfig(vocab_size=64, context_length=16, d_model=32, d_ff=64, n_layers=4,
                                    n_heads=4))
        assert apply_checkpointing(lm.layers, policy) == wrapped
        assert sum(type(m).__name__ == "CheckpointWrapper" for m in lm.layers) == wrapped
        if policy == "all-but-1":  # the last layer's activations are the ones kept
            assert type(lm.layers[3]).__name__ != "CheckpointWrapper"


def _calls(checkpoint: str, ops: str = "attention", float8: bool = False) -> int:
    """How many times a tiny LM's attention kernel (or its matrix products) runs in one forward and
    backward under `checkpoint`, its products trainperf's float8 GEMMs where `float8` says."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from trainperf.models.lm import LMConfig, TransformerLM, float8_blocks
    from trainperf.workloads.sharded import attention_ops, product_ops

    torch.manual_seed(0)
    lm = TransformerLM(LMConfig(vocab_size=64, context_length=16, d_model=32, d_ff=64, n_layers=3, n_heads=4))
    if float8:
        float8_blocks(lm)
    kernels = attention_ops() if ops == "attention" else product_ops()
    apply_checkpointing(lm.layers, checkpoint)

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            Count.calls += func in kernels
            return func(*args, **(kwargs or {}))

    tokens = torch.randint(0, 64, (2, 16))
    with Count():
        lm(tokens).sum().backward()
    return Count.calls


def test_keeping_attention_spares_its_recomputation_and_nothing_else():
    # three layers: each attention runs once in the forward; full checkpointing runs it again in
    # the backward, +attn keeps its output instead
    assert _calls("none") == 3
    assert _calls("full") == 6
    assert _calls("full+attn") == 3
    assert _calls("all-but-1+attn") == 3
    assert _calls("every-2") == 5


@pytest.mark.parametrize("float8", [False, True])
def test_ops_keeps_every_matrix_product_float8_ones_too(float8):
    """`ops` recomputes no product of the forward in the backward, PyTorch's or trainperf's float8
    GEMMs, while full checkpointing computes each decoder product again."""
    plain, ops, full = (_calls(c, "products", float8) for c in ("none", "ops", "full"))
    assert ops == plain
    assert full >= plain + 3 * 3  # q, k and v, o, gate and up again in each of the three layers


def test_recomputed_flops_are_counted_apart_from_the_model_flops():
    from trainperf.models.lm import TransformerLM

    s = spec(model="small", seq=1024, batch=8)
    with torch.device("meta"):
        params = TransformerLM(s.model_config()).matmul_params()
    model, redo = flop_counts(s, params, checkpointed_layers=0)
    assert redo == 0 and model > 0
    full_model, full_redo = flop_counts(spec(model="small", seq=1024, batch=8, checkpoint="full"), params, 12)
    # the layers' forward once more: a third of the step's FLOPs, less the LM head's share
    assert full_model == model and 0.3 * model < full_redo < model / 3
    cfg = s.model_config()
    _, kept_redo = flop_counts(spec(model="small", seq=1024, batch=8, checkpoint="full+attn"), params, 12)
    causal_attention_forward = 4 * 12 * 1024 * cfg.d_model * 8 * 1024 / 2
    assert full_redo - kept_redo == causal_attention_forward


@pytest.mark.parametrize("kw, message", [
    (dict(batch=3), "does not split"),
    (dict(checkpoint="every-0"), "every-K"),
    (dict(checkpoint="some"), "every-K"),
    (dict(checkpoint="all-but-2"), "all-but-N .N fewer than the layers"),  # tiny has 2 layers
    (dict(checkpoint="ops+attn"), r"with \+attn"),  # ops keeps attention already
    (dict(checkpoint="none+attn"), r"with \+attn"),
    (dict(checkpoint="full+attention"), r"with \+attn"),
    (dict(shard="zero3"), "shard"),
    (dict(shard="none", offload=True), "sharded model"),
    (dict(float8="trainperf-all"), "float8"),  # the Llama step's name: here every product is float8
    (dict(float8="trainperf-head", loss="torch"), "takes --loss chunked"),
    (dict(prefetch=-1), "number of units"),
    (dict(unit_layers=0), "a number of decoder layers from 1 to 2"),
    (dict(cuda_graph=True, offload=True), "choose one"),
])
def test_bad_specs_are_refused_with_their_reason(kw, message):
    with pytest.raises(SpecError, match=message):
        validate(spec(**kw))


def test_the_cli_records_a_sharded_step_on_gloo(db, tmp_path):
    res = runner.invoke(app, ["shard", "--world-size", "2", "--shard", "full,none", "--checkpoint",
                              "none,full", "--db", str(db), "--out", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    recs = Store(db).records()
    assert len(recs) == 4 and all(r.status == "ok" for r in recs), [r.reason for r in recs]
    for r in recs:
        m = r.metrics
        assert m["step_ms_median"] > 0 and m["forward_ms"] > 0 and m["tokens_per_s"] > 0
        assert (m["recompute_tflop"] > 0) == (r.spec["checkpoint"] == "full")
    assert (tmp_path / "shard.csv").exists()
    made = pd.read_csv(tmp_path / "shard_contributions.csv")  # the fastest case's two neighbours
    assert sorted(made.setting) == ["checkpoint", "shard"] and (made.slower_by >= 1).all()


def test_float8_without_torchao_or_a_float8_gpu_is_an_unsupported_row_beside_the_bf16_case(db, tmp_path):
    res = runner.invoke(app, ["shard", "--world-size", "2", "--float8", "off,torchao", "--iters", "1",
                              "--warmup", "0", "--db", str(db), "--out", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    by_float8 = {r.spec["float8"]: r for r in Store(db).records()}
    assert by_float8["off"].status == "ok"
    assert by_float8["torchao"].status == "unsupported"
    assert "pip install 'trainperf[float8]'" in by_float8["torchao"].reason or \
        "float8 tensor cores" in by_float8["torchao"].reason  # torchao there, no GPU for it
    made = pd.read_csv(tmp_path / "shard_contributions.csv")
    assert made.setting.tolist() == ["float8"] and made.status.tolist() == ["unsupported"]


def test_a_shard_sweep_over_world_sizes_draws_its_scaling(db, tmp_path):
    res = runner.invoke(app, ["shard", "--world-size", "1,2", "--iters", "1", "--warmup", "0",
                              "--db", str(db), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert sorted(r.spec["world_size"] for r in Store(db).records()) == [1, 2]
    assert (tmp_path / "shard_scaling.png").stat().st_size > 0 and "wrote" in res.output


def test_batch_per_rank_grows_the_global_batch_with_the_world(db, tmp_path):
    res = runner.invoke(app, ["shard", "--world-size", "1,2", "--batch-per-rank", "2", "--iters", "1",
                              "--warmup", "0", "--db", str(db), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert sorted((r.spec["world_size"], r.spec["batch"]) for r in Store(db).records()) == [(1, 2), (2, 4)]
    both = runner.invoke(app, ["shard", "--batch", "4", "--batch-per-rank", "2", "--db", str(db)])
    assert both.exit_code == 2
    assert "give --batch (the global batch) or --batch-per-rank, not both" in both.output


def test_scaling_efficiency_is_against_the_model_s_best_on_one_gpu():
    import pandas as pd

    from trainperf.workloads.sharded import scaling_table

    ok = pd.DataFrame({"model": ["xl", "xl", "xl", "2.7B"], "shard": ["full", "full", "none", "full"],
                       "checkpoint": "full", "world_size": [1, 4, 4, 2],
                       "tokens_per_s": [100.0, 360.0, 300.0, 90.0]})
    table = scaling_table(ok)
    assert table.efficiency.iloc[:3].tolist() == [1.0, 0.9, 0.75] and pd.isna(table.efficiency.iloc[3])
    four = ok.iloc[:2].assign(unit_layers=4, tokens_per_s=[50.0, 100.0])
    units = scaling_table(pd.concat([ok.iloc[:2].assign(unit_layers=1), four]))
    assert units.efficiency.tolist() == [1.0, 0.9, 0.5, 0.25]  # the slower choice on one GPU starts below 1
    assert units.choice.tolist()[2:] == ["xl full ckpt=full unit=4"] * 2
    graphed = scaling_table(ok.iloc[:2].assign(cuda_graph=[False, True]))
    assert graphed.choice.tolist() == ["xl full ckpt=full", "xl full ckpt=full graphed"]


def test_ddp_is_measured_once_whatever_fsdp2_units_the_sweep_names(db, tmp_path):
    res = runner.invoke(app, ["shard", "--world-size", "2", "--shard", "full,none", "--unit-layers", "1,2",
                              "--iters", "1", "--warmup", "0", "--db", str(db), "--out", str(tmp_path),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    cases = sorted((r.spec["shard"], r.spec["unit_layers"]) for r in Store(db).records())
    assert cases == [("full", 1), ("full", 2), ("none", 1)]


def test_the_cs336_preset_is_the_leaderboard_model():
    cfg = spec(model="cs336-8b", vocab=None, seq=32768).model_config()
    dims = (cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.n_heads, cfg.vocab_size)
    assert dims == (4096, 11008, 34, 32, 151_936)


def test_one_rank_of_a_sharded_step_is_profiled_and_its_memory_shown(tmp_path):
    res = runner.invoke(app, ["profile", "shard", "--rank", "1", "--checkpoint", "full", "--out",
                              str(tmp_path)])
    assert res.exit_code == 0, res.output
    profile = tmp_path / "profile_shard_tiny_n2_full_full_rank1.json"
    ranges = {r["range"] for r in json.loads(profile.read_text())["ranges"]}
    assert {"fwd", "bwd", "optimizer", "fwd.layer.attn.qkv_proj"} <= ranges  # wrappers named away
    assert any(r.startswith("FSDP::all_gather") for r in ranges)  # FSDP2's own ranges, its collectives
    res = runner.invoke(app, ["memory", "shard", "--rank", "0", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "memory_shard_tiny_n2_full_none_rank0_timeline.png").exists()


def test_a_sharded_profile_takes_the_step_s_choices_and_names_them_in_its_files(tmp_path):
    res = runner.invoke(app, ["profile", "shard", "--float8", "trainperf", "--reshard-after-forward", "off",
                              "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    profile = tmp_path / "profile_shard_tiny_n2_full_none_float8-trainperf_gathered_rank0.json"
    saved = json.loads(profile.read_text())
    assert saved["meta"]["spec"]["float8"] == "trainperf"
    assert saved["meta"]["spec"]["reshard_after_forward"] is False
    assert {"_Float8MLP", "_Float8Linear"} <= {k["kernel"] for k in saved["kernels"]}  # its products
    res = runner.invoke(app, ["profile", "shard", "--float8", "fp4"])
    assert res.exit_code == 2 and "--float8" in res.output


def test_the_profiled_rank_must_be_one_of_the_run():
    res = runner.invoke(app, ["profile", "shard", "--rank", "2", "--world-size", "2"])
    assert res.exit_code == 2 and "--rank must be between 0 and" in res.output


def test_exposed_communication_is_the_nccl_time_no_computation_overlaps():
    import pandas as pd

    from trainperf.profiling.overlap import communication_overlap

    kernels = pd.DataFrame({"name": ["ampere_gemm", "ncclDevKernel_AllGather", "ncclKernel_ReduceScatter",
                                     "vectorized_elementwise", "ncclDevKernel_AllGather"],
                            "start": [0.0, 5.0, 12.0, 14.0, 30.0], "end": [10.0, 15.0, 20.0, 16.0, 31.0]})
    got = communication_overlap(kernels)
    # comm runs over [5, 20] and [30, 31]: 16; computation covers [5, 10] and [14, 16] of it: 7 hidden
    assert got["comm"] == 16 and got["exposed"] == 9 and got["hidden_share"] == pytest.approx(7 / 16)
    assert communication_overlap(kernels[~kernels.name.str.contains("nccl")])["comm"] == 0


def test_exposed_communication_with_no_computation_queued_is_the_host_s():
    import pandas as pd

    from trainperf.profiling.overlap import communication_overlap

    # an all-gather runs over [0, 10] and a matmul over [0, 4]: [4, 10] is exposed. The next
    # matmul starts at 10, as soon as the all-gather ends; the host launched it at `launched`
    kernels = pd.DataFrame({"correlation": [1, 2, 3], "name": ["gemm", "ncclDevKernel_AllGather", "gemm"],
                            "start": [0.0, 0.0, 10.0], "end": [4.0, 10.0, 14.0]})

    def host_late(launched: float) -> float:
        launches = pd.DataFrame({"correlation": [1, 2, 3], "start": [-1.0, -0.5, launched], "thread": 0})
        got = communication_overlap(kernels, launches)
        assert got["exposed"] == 6
        return got["exposed_host"]

    assert host_late(2.0) == 0  # queued through all of it: the matmul waited for the collective
    assert host_late(8.0) == 4  # launched at 8: over [4, 8] the GPU had nothing else to run
    assert host_late(10.0) == 6  # launched as the collective ended: all of it the host's
    assert "exposed_host" not in communication_overlap(kernels)  # no launches, no split


def test_only_the_kernels_the_step_launched_count_not_the_barrier_that_aligned_the_ranks():
    import pandas as pd

    from trainperf.profiling.overlap import launched_in_steps

    kernels = pd.DataFrame({"correlation": [1, 2, 3], "name": ["ncclDevKernel_AllReduce", "gemm",
                                                              "ncclDevKernel_AllGather"],
                            "start": [1.0, 20.0, 21.0], "end": [2.0, 25.0, 30.0]})
    launches = pd.DataFrame({"correlation": [1, 2, 3], "start": [0.5, 10.5, 11.0], "thread": 0})
    ranges = pd.DataFrame({"name": ["barrier", "step"], "start": [0.0, 10.0], "end": [1.0, 12.0],
                           "thread": 0})
    assert launched_in_steps(kernels, launches, ranges).correlation.tolist() == [2, 3]


def test_a_rank_that_waited_for_its_peer_is_told_apart_from_the_one_the_step_waited_for():
    from trainperf.profiling.overlap import across_ranks

    # rank 0 finished its backward 30 ms early and waited for rank 1 inside the all-reduce
    early, late = {"comm": 65.0, "exposed": 65.0}, {"comm": 35.0, "exposed": 35.0}
    assert across_ranks([early, late]) == {"nccl_ms": 65.0, "exposed_comm_ms": 65.0,
                                           "exposed_comm_least_ms": 35.0}
    early["exposed_host"], late["exposed_host"] = 5.0, 20.0  # the host share of the most exposed rank
    assert across_ranks([early, late])["exposed_comm_host_ms"] == 5.0


def test_a_case_far_beyond_a_gpu_is_refused_up_front_with_what_it_needs():
    from trainperf.workloads.sharded import bound_bytes, memory_needed, too_large

    h200 = 143771 * 2**20
    eight_b = dict(model="cs336-8b", world_size=2, shard="full", seq=32768, batch=2, loss="chunked",
                   dtype="bf16", dist_backend="nccl", vocab=None)
    ops = memory_needed(spec(**eight_b, checkpoint="ops"))
    why = too_large(ops, "ops", h200)
    # the activations' peak holds the weights and AdamW's moments (12 bytes a parameter), not the gradients
    assert why.startswith("needs at least 142.1 GiB a rank: 45.4 GiB of fp32 weights and AdamW's moments")
    assert "8.13B" in why and "the gradients come as the activations go" in why
    assert "96.7 GiB of activations that --checkpoint ops keeps" in why and why.endswith("140.4 GiB")
    full = memory_needed(spec(**eight_b, checkpoint="full"))
    assert bound_bytes(full) == full["state"] == 16 * full["params"] / 2  # the whole state, at the optimizer
    assert too_large(full, "full", h200) is None
    assert too_large(full, "full", 50 * 2**30).startswith("needs at least 60.5 GiB a rank: fp32 weights, "
                                                          "gradients and AdamW state (8.13B parameters")
    # replayed as a CUDA graph the gradients persist, beside the activations
    graphed = memory_needed(spec(**eight_b, checkpoint="ops", cuda_graph=True))
    assert graphed["beside_activations"] == graphed["state"] == ops["state"]
    assert "96.7 GiB of activations" in too_large(graphed, "ops", h200)
    assert "60.5 GiB of fp32 weights, gradients and AdamW state" in too_large(graphed, "ops", h200)
    # the float8 head keeps the float8 gradient of every logit of a rank's 32,768 tokens
    head = memory_needed(spec(**eight_b, checkpoint="all-but-8+attn", float8="trainperf-head"))
    assert head["logits"] == 32768 * 151_936
    assert "4.6 GiB of the loss's logits" in too_large(head, "all-but-8+attn", 70 * 2**30)
    small = memory_needed(spec(checkpoint="every-2", loss="torch"))  # tiny: 2 layers, the first checkpointed
    cfg = spec().model_config()
    per_token = cfg.d_model + (9 * cfg.d_model + 3 * cfg.d_ff)
    assert small["activations"] == per_token * 2 * 16 * 4  # 2 sequences of 16 a rank, fp32
    assert small["logits"] == 4 * 2 * 16 * 64 and small["shards"] == 2
    assert memory_needed(spec(checkpoint="all-but-1", loss="torch"))["activations"] == small["activations"]
    # the 8B with all but 8 of its 34 layers checkpointed: 8 layers' activations more than full
    eight = [memory_needed(spec(**eight_b, checkpoint=c))["activations"] for c in ("full", "all-but-8")]
    layer = (9 * 4096 + 3 * 11008 - 4096) * 32768 * 2
    assert eight[1] - eight[0] == 8 * layer
    # +attn keeps one more width a token in every checkpointed layer
    kept = memory_needed(spec(**eight_b, checkpoint="full+attn"))["activations"]
    assert kept - eight[0] == 34 * 4096 * 32768 * 2


@pytest.mark.parametrize("float8, per_token", [
    ("off", (9 * 4096 + 3 * 11008) * 2),
    ("torchao", (6 * 4096 + 2 * 11008) * 2),  # inputs of its products a compiled layer may compute again
    ("trainperf", 6 * 4096 * 2 + 3 * 4096 + 3 * 11008),  # its products' inputs, gate and up kept in float8
])
def test_float8_keeps_fewer_bytes_a_layer_by_what_its_products_save(float8, per_token):
    from trainperf.workloads.sharded import memory_needed

    s = spec(model="cs336-8b", world_size=2, seq=32768, batch=2, loss="chunked", dtype="bf16", vocab=None,
             float8=float8)
    none, full = (memory_needed(replace(s, checkpoint=c))["activations"] for c in ("none", "full"))
    assert none == 34 * per_token * 32768
    assert full == 34 * 4096 * 2 * 32768  # a layer checkpointed whole keeps its input, whatever float8 does


def test_a_graphed_step_s_peak_counts_the_moments_made_after_its_capture():
    """Replays allocate nothing: a graphed rank's peak is its capture's, taken before AdamW's
    first step made the moments, plus the moments' bytes."""
    from types import SimpleNamespace

    from trainperf.workloads.sharded import peak_bytes

    model = torch.nn.Linear(16, 8)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    moments = 2 * 4 * (16 * 8 + 8)  # two fp32 moments a parameter; the two step counters are more
    eager = SimpleNamespace(capture_peak=None, opt=opt)
    assert peak_bytes(eager, 10**6) == 10**6
    graphed = SimpleNamespace(capture_peak=10**6, opt=opt)
    assert moments < peak_bytes(graphed, 10**5) - 10**6 <= moments + 2 * 8
    assert peak_bytes(graphed, 10**7) == 10**7  # an eager peak above the capture's stands


def test_the_lower_bound_is_below_every_measured_peak():
    """Every committed GPU row of the step at a preset, eager (a graphed row's peak is its capture's,
    which left AdamW's moments out until the step counted them), against the bound of its spec."""
    from dataclasses import fields
    from pathlib import Path

    from trainperf.models.source import is_model_source
    from trainperf.workloads.sharded import bound_bytes, memory_needed

    names = {f.name for f in fields(ShardSpec)}
    rows = [r for db in Path(__file__).parents[1].glob("benchmarks/results/**/*.db")
            for r in Store(db, create=False).records() if r.workload == "shard" and r.status == "ok"
            and r.metrics.get("peak_mem_gb") and not r.spec.get("cuda_graph") and not r.spec.get("offload")]
    checked = 0
    for r in rows:
        s = ShardSpec(**{k: v for k, v in r.spec.items() if k in names})
        if is_model_source(s.model):  # another model's bound is its state alone
            continue
        assert bound_bytes(memory_needed(s)) / 2**30 <= r.metrics["peak_mem_gb"], s.label()
        checked += 1
    assert checked >= 40  # the 8B's frontier, xl's and 2.7B's scaling, the calibrations


