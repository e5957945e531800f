"""The step model of `trainperf predict`: its schedules on inputs whose answer is known by hand, the
links' bandwidth, a prediction that reproduces its own calibration, the check against measured
rows of a results tree, and the two commands."""

import math
from dataclasses import replace

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.errors import SpecError
from trainperf.predict.check import check, fit_contention, summary
from trainperf.predict.links import HOP_LATENCY_MS, Links, links_from_records, parse_rate
from trainperf.predict.model import Calibration, model_flops, predict_sharded
from trainperf.predict.model import work as work_of
from trainperf.predict.schedule import Unit, replicated_step, sharded_step, with_contention
from trainperf.predict.shape import parameters_of, shape_of
from trainperf.workloads.comm import BUS_FACTOR
from trainperf.workloads.sharded import ShardSpec

H200 = "NVIDIA H200"


def test_sharded_step_hides_small_collectives_behind_the_compute():
    """Compute far longer than each collective: only the first gather and the last reduction wait
    (forward 10 + backward 20 a unit, gathers and reductions of 1)."""
    units = [Unit(10, 20, gather_ms=1, reduce_ms=1)] * 3
    t = sharded_step(Unit(0, 0), units)
    assert t.compute_ms == 90
    assert t.step_ms == 92
    assert t.exposed_comm_ms == 2
    assert t.comm_ms == 3 + 2 + 3  # forward gathers, the backward's (the last unit stays), reductions


def test_sharded_step_without_compute_is_bound_by_its_links():
    """No compute at all: the step is the gathers one after another and the reductions running
    beside the backward's gathers on their own stream (worked out by hand: 6 ms)."""
    t = sharded_step(Unit(0, 0), [Unit(0, 0, gather_ms=1, reduce_ms=1)] * 3)
    assert t.step_ms == 6
    assert t.exposed_comm_ms == 6
    assert t.hidden_comm_ms == 2  # two reductions overlap the backward's gathers


def test_sharded_step_gathers_again_in_the_backward_only_when_resharded():
    units = [Unit(0, 0, gather_ms=1)] * 4
    assert sharded_step(Unit(0, 0), units, reshard_after_forward=False).comm_ms == 4
    assert sharded_step(Unit(0, 0), units, reshard_after_forward=True).comm_ms == 4 + 3


def test_deeper_prefetch_never_slows_the_step():
    units = [Unit(1, 2, gather_ms=1.5, reduce_ms=0.5)] * 6
    steps = [sharded_step(Unit(0.5, 1, 1, 1), units, prefetch=p).step_ms for p in (1, 2, 3)]
    assert steps == sorted(steps, reverse=True)
    with pytest.raises(ValueError, match="prefetch"):
        sharded_step(Unit(0, 0), units, prefetch=0)


def test_replicated_step_without_overlap_adds_the_communication():
    t = replicated_step(10, 20, [3, 3, 3], optimizer_ms=5, overlap=False)
    assert t.step_ms == 10 + 20 + 9 + 5
    assert t.exposed_comm_ms == 9


def test_replicated_step_with_overlap_exposes_only_the_last_bucket():
    t = replicated_step(10, 20, [1, 1, 1, 1], optimizer_ms=5)
    assert t.step_ms == 10 + 20 + 1 + 5
    assert t.exposed_comm_ms == 1


def test_replicated_step_is_bandwidth_bound_when_buckets_outlast_the_backward():
    """Buckets ready at 15, 20, 25, 30 (forward 10, backward 20 in four), 10 ms each: back to back
    from the first."""
    t = replicated_step(10, 20, [10] * 4)
    assert t.step_ms == 15 + 40
    assert t.exposed_comm_ms == 25


def test_contention_slows_only_by_the_hidden_communication():
    t = sharded_step(Unit(0, 0), [Unit(10, 20, gather_ms=1, reduce_ms=1)] * 3)
    slowed = with_contention(t, 0.5)
    assert slowed.step_ms == pytest.approx(t.step_ms + 0.5 * t.hidden_comm_ms)
    assert slowed.exposed_comm_ms == pytest.approx(t.exposed_comm_ms)


def test_fit_contention_finds_the_slowdown_that_made_the_steps():
    schedule, hidden = pd.Series([100.0, 200, 300, 400]), pd.Series([10.0, 50, 20, 80])
    measured = schedule + 0.3 * hidden
    assert fit_contention(schedule.to_numpy(), hidden.to_numpy(), measured.to_numpy()) == pytest.approx(0.3)


def comm_records(busbw: float = 100.0) -> list[dict]:
    return [{"status": "ok", "dist_backend": "nccl", "timing": "loop", "op": op, "world_size": 2,
             "bytes": size, "busbw_gbps": busbw * (0.5 if size == 2**20 else 1.0)}
            for op in ("all_gather", "reduce_scatter", "all_reduce") for size in (2**20, 2**30)]


def test_links_interpolate_bus_bandwidth_in_log_size_and_hold_it_at_the_ends():
    links = links_from_records(comm_records(), "test")
    assert links.busbw("all_gather", 2**25, 2) == pytest.approx(75.0)  # halfway in log size
    assert links.busbw("all_gather", 10, 2) == 50.0
    assert links.busbw("all_gather", 2**40, 8) == 100.0  # the nearest measured rank count
    ms = links.collective_ms("all_reduce", 2**30, 4)
    assert ms == pytest.approx(2**30 * BUS_FACTOR["all_reduce"](4) / 100e9 * 1e3)
    assert links.collective_ms("all_reduce", 2**30, 1) == 0.0


def test_links_across_nodes_need_the_network_and_are_bound_by_it():
    links = links_from_records(comm_records(), "test", gpus_per_node=8)
    with pytest.raises(SpecError, match="--inter-node"):
        links.collective_ms("all_gather", 2**30, 16)
    networked = Links(links.curves, "test", inter_node_gbs=parse_rate("400Gb"), gpus_per_node=8)
    assert networked.collective_ms("all_gather", 2**30, 16) > 2 * links.collective_ms("all_gather", 2**30, 8)


def test_links_between_nodes_come_from_cross_records_where_a_multi_node_run_made_them():
    cross = [{**r, "scope": "cross", "group_size": 2, "world_size": 16, "nodes": 2, "busbw_gbps": 20.0}
             for r in comm_records()]
    mixed = [{**r, "world_size": 16, "nodes": 2, "busbw_gbps": 1.0} for r in comm_records()]  # left out
    links = links_from_records([*comm_records(), *cross, *mixed], "test", gpus_per_node=8)
    assert links.network() == "measured (comm --scope cross)"
    assert links.busbw("all_gather", 2**30, 8) == 100.0
    ms = links.collective_ms("all_gather", 2**30, 16)
    assert ms == pytest.approx(2**30 * BUS_FACTOR["all_gather"](16) / 20e9 * 1e3 + 2 * HOP_LATENCY_MS)
    given = links.placed(8, parse_rate("800Gb"))
    assert given.network() == "100 GB/s per GPU (given)"
    assert given.collective_ms("all_gather", 2**30, 16) < ms


def test_predict_across_nodes_without_a_network_is_one_line_naming_the_option(tmp_path):
    root = results_tree(tmp_path / "results")
    res = CliRunner().invoke(app, ["predict", "--model", "small", "--gpus", "16", "--results", str(root),
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "give --inter-node" in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("text, gbs", [("400Gb", 50.0), ("400Gb/s", 50.0), ("400gbps", 50.0), ("50GB", 50.0)])
def test_parse_rate_reads_bits_and_bytes(text, gbs):
    assert parse_rate(text) == gbs


@pytest.mark.parametrize("text", ["fast", "0Gb", "-5GB", "400"])
def test_parse_rate_refuses_what_is_not_a_rate(text):
    with pytest.raises(SpecError, match="--inter-node"):
        parse_rate(text)


def spec(**kw) -> ShardSpec:
    base = {"model": "small", "world_size": 1, "shard": "full", "checkpoint": "none", "seq": 256, "batch": 8}
    return ShardSpec(**{**base, **kw})


def work(s: ShardSpec):
    return work_of(s, shape_of(s))


def test_a_prediction_of_its_own_calibration_is_the_calibration():
    cal = Calibration(spec(), forward_backward_ms=120.0, optimizer_ms=8.0, gpu=H200, source="test",
                      peak_mem_gb=10.0, gpu_memory_gb=139.8)
    p = predict_sharded(cal.spec, cal, links_from_records(comm_records(), "test"))
    assert p.timeline.step_ms == pytest.approx(128.0)
    assert p.timeline.exposed_comm_ms == pytest.approx(0.0, abs=1e-9)
    assert p.mem_gb_per_rank == pytest.approx(10.0)
    assert p.fits is True
    assert p.mfu == pytest.approx(model_flops(cal.spec, shape_of(cal.spec)) / 0.128 / 1e12 / 989.4)


def test_full_sharding_splits_the_batch_and_the_optimizer_over_the_ranks():
    cal = Calibration(spec(), forward_backward_ms=120.0, optimizer_ms=8.0, gpu=H200, source="test")
    fast = Links({op: {2: [(1, 1e9)]} for op in ("all_gather", "reduce_scatter", "all_reduce")}, "fast")
    p = predict_sharded(spec(world_size=4), cal, fast)
    assert p.timeline.compute_ms == pytest.approx(120.0 / 4 + 8.0 / 4)
    assert p.mem_gb_per_rank is None and p.fits is None
    none = predict_sharded(spec(world_size=4, shard="none"), cal, fast)
    assert none.timeline.compute_ms == pytest.approx(120.0 / 4 + 8.0)


def test_a_truncated_calibration_scales_by_the_flops_of_the_whole_model():
    part = spec(layers=4, checkpoint="all-but-2")
    cal = Calibration(part, forward_backward_ms=100.0, optimizer_ms=4.0, gpu=H200, source="test")
    whole = spec(checkpoint="all-but-2")
    p = predict_sharded(whole, cal, links_from_records(comm_records(), "test"))
    flops = [sum(f + b for f, b in layers) + sum(root) for layers, root in (work(whole), work(part))]
    params = [parameters_of(s).total for s in (whole, part)]
    assert p.timeline.compute_ms == pytest.approx(100.0 * flops[0] / flops[1] + 4.0 * params[0] / params[1])


def test_checkpointing_adds_the_recomputed_forward_to_the_backward():
    (plain, _), (kept, _) = work(spec(checkpoint="none")), work(spec(checkpoint="full"))
    assert kept[0][1] == pytest.approx(plain[0][1] + plain[0][0])
    (attn, _) = work(spec(checkpoint="full+attn"))
    assert plain[0][1] < attn[0][1] < kept[0][1]


SHARD_ROW = {"workload": "shard", "status": "ok", "model": "small", "seq": 256, "checkpoint": "none",
             "compile": False, "float8": "off", "cuda_graph": False, "dtype": "bf16", "attention": "sdpa",
             "loss": "torch", "optimizer": "adamw", "shard": "full", "env_gpu_name": H200,
             "reshard_after_forward": True, "prefetch": 0, "unit_layers": 1, "reduce_dtype": "fp32"}


def results_tree(root, measured_ms: float = 80.0):
    """A run with a one-GPU row, a two-GPU row of the same choices, one of other choices (no
    calibration), a ddp row and comm records."""
    run = root / "shard" / "h200x2-2026-01-01"
    run.mkdir(parents=True)
    rows = [{**SHARD_ROW, "world_size": 1, "batch": 8, "step_ms_median": 128.0, "optimizer_ms": 8.0,
             "peak_mem_gb": 10.0, "created_at": "2026-01-01T00:00:00"},
            {**SHARD_ROW, "world_size": 2, "batch": 8, "step_ms_median": measured_ms, "optimizer_ms": 4.0,
             "exposed_comm_ms": 3.0, "peak_mem_gb": 6.0, "created_at": "2026-01-01T00:01:00"},
            {**SHARD_ROW, "world_size": 2, "batch": 8, "checkpoint": "full", "step_ms_median": 90.0,
             "created_at": "2026-01-01T00:02:00"}]
    pd.DataFrame(rows).to_csv(run / "shard.csv", index=False)
    (run / "env.json").write_text('{"gpu_memory_gb": 139.8}')
    ddp = root / "ddp" / "h200x2-2026-01-01"
    ddp.mkdir(parents=True)
    pd.DataFrame([{"workload": "ddp", "status": "ok", "model": "small", "world_size": 2, "batch": 4,
                   "seq": 256, "variant": "naive", "vocab": 10000, "step_ms_median": 60.0, "compute_ms": 50.0,
                   "comm_alone_ms": 10.0, "exposed_comm_ms": 10.0, "env_gpu_name": H200}]).to_csv(
        ddp / "ddp.csv", index=False)
    comm = root / "comm" / "h200x2-2026-01-01"
    comm.mkdir(parents=True)
    pd.DataFrame([{**r, "env_gpu_name": H200} for r in comm_records()]).to_csv(comm / "comm.csv", index=False)
    return root


def test_check_predicts_each_multi_gpu_row_from_parts_measured_apart(tmp_path):
    frame = check(results_tree(tmp_path))
    shard = frame[(frame.workload == "shard") & (frame.reason == "")].iloc[0]
    assert shard.compute_from == "shard/h200x2-2026-01-01 (1 GPU)"
    assert shard.step_ms_measured == 80.0
    assert shard.schedule_ms > (120.0 / 2 + 8.0 / 2)  # the compute of half the batch, plus what waits
    ddp = frame[frame.workload == "ddp"].iloc[0]
    assert ddp.schedule_ms == pytest.approx(60.0)  # naive: compute, then every all-reduce
    missing = frame[frame.reason != ""]
    assert len(missing) == 1 and "checkpoint full" in missing.iloc[0].reason
    assert math.isnan(missing.iloc[0].step_ms_predicted)
    table = summary(frame)
    assert table.iloc[-1].rows == 2  # the unpredicted row is listed, not counted
    # the memory a rank holds, predicted beside the measured peak; ddp's rows predict none
    assert shard.mem_gb_measured == 6.0 and 0 < shard.mem_gb_predicted < 10.0
    assert shard.mem_error == pytest.approx(shard.mem_gb_predicted / 6.0 - 1)
    assert math.isnan(ddp.mem_error)
    assert table.iloc[-1].mem_error_median == pytest.approx(abs(shard.mem_error))


def test_a_row_is_calibrated_by_a_one_gpu_row_of_its_own_sharding_first(tmp_path):
    """FSDP2 on one GPU holds its state and pays its hooks otherwise than DDP: a later one-GPU DDP
    row of the same choices does not calibrate the two-GPU FSDP2 row."""
    root = results_tree(tmp_path)
    csv = root / "shard" / "h200x2-2026-01-01" / "shard.csv"
    ddp_one = {**SHARD_ROW, "shard": "none", "world_size": 1, "batch": 8, "step_ms_median": 200.0,
               "optimizer_ms": 8.0, "peak_mem_gb": 30.0, "created_at": "2026-01-01T00:03:00"}
    pd.concat([pd.read_csv(csv), pd.DataFrame([ddp_one])]).to_csv(csv, index=False)
    shard = check(root).query("workload == 'shard' and reason == ''").iloc[0]
    assert shard.schedule_ms < 200.0 / 2  # the FSDP2 row's 120 ms of compute, halved, and what waits
    assert shard.mem_gb_predicted < 10.0  # its 10 GB peak over two ranks, not DDP's 30 GB


def test_predict_command_writes_one_row_per_choice_and_count(tmp_path):
    root = results_tree(tmp_path / "results")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["predict", "--model", "small", "--gpus", "1,2,16", "--shard", "full,none",
                                   "--inter-node", "400Gb", "--results", str(root), "--out", str(out),
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    frame = pd.read_csv(out / "predict.csv")
    assert list(zip(frame.shard, frame.gpus, strict=True)) == [("full", 1), ("full", 2), ("full", 16),
                                                                ("none", 1), ("none", 2), ("none", 16)]
    assert frame.nodes.tolist() == [1, 1, 2] * 2
    assert frame.step_ms.iloc[0] == pytest.approx(128.0)  # one GPU at the calibration's batch: itself
    given = frame.inputs.str.contains("between nodes 50 GB/s per GPU (given)", regex=False)
    assert given.tolist() == [False, False, True] * 2
    assert (frame.mem_gb_per_rank[frame.shard == "full"].diff().dropna() < 0).all()
    assert (frame.checked_rows == 2).all()  # the tree's shard and ddp rows on this GPU: the stated error
    assert frame.checked_error_median.notna().all() and frame.checked_mem_error_median.notna().all()


def test_predict_check_command_writes_the_table_the_summary_and_says_what_it_could_not_predict(tmp_path):
    root = results_tree(tmp_path / "results")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["predict-check", "--results", str(root), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "1 rows not predicted" in res.output
    frame = pd.read_csv(out / "predict_check.csv")
    assert {"step_ms_predicted", "step_ms_measured", "exposed_comm_ms_predicted",
            "exposed_comm_ms_measured"} <= set(frame.columns)
    assert len(pd.read_csv(out / "predict_check_summary.csv")) == 3  # shard, ddp, all


QWEN = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def qwen_config(tmp_path_factory):
    from transformers import AutoConfig

    path = tmp_path_factory.mktemp("qwen") / "config.json"
    AutoConfig.for_model("qwen2", **QWEN).to_json_file(str(path))
    return str(path)


def test_another_model_s_shape_splits_its_counted_flops_into_layers_attention_and_head(qwen_config):
    """The parameters counted on the meta device match the built model's; from the flop counter's
    count of one forward, the attention left over is the counter's own count of it (whole)."""
    from trainperf.core.flops import counted_flops
    from trainperf.models.source import ModelSource, logits_of

    model = ModelSource(qwen_config).build(torch.device("cpu"))
    s = ShardSpec(model=qwen_config, world_size=1, shard="full", checkpoint="none", seq=16, batch=2)
    params = parameters_of(s)
    assert params.total == sum(p.numel() for p in model.parameters())
    layer = model.model.layers[0]
    linears = [m for m in layer.modules() if isinstance(m, torch.nn.Linear)]
    assert params.layer_matmul == sum(m.weight.numel() for m in linears)
    assert params.head == 128 * 32 and params.n_layers == 3
    with torch.no_grad():
        per_token = counted_flops(lambda: logits_of(model, torch.zeros(2, 16, dtype=torch.long))) / 32
    shape = shape_of(s, (per_token, s))
    d_attention = 4 * 8  # heads x head dim
    assert shape.layer_attention == pytest.approx(4 * 16 * d_attention)  # QK^T and PV over 16 keys, whole
    assert shape.head_forward == 2 * 128 * 32
    deeper = replace(s, layers=None)
    assert shape_of(deeper, (per_token, replace(s, layers=2))).layer_forward > shape.layer_forward
    with pytest.raises(SpecError, match="counted FLOPs"):
        shape_of(s)


def test_predict_takes_another_model_calibrated_with_counted_flops(tmp_path, qwen_config):
    root = results_tree(tmp_path / "results")
    run = root / "your-model" / "h200-2026-01-01"
    run.mkdir(parents=True)
    row = {**SHARD_ROW, "model": qwen_config, "seq": 16, "world_size": 1, "batch": 4, "step_ms_median": 50.0,
           "optimizer_ms": 5.0, "peak_mem_gb": 2.0, "flops_source": "counted (forward x 3)",
           "model_tflop": 3 * 4 * 16 * 1e6 / 1e12, "created_at": "2026-01-01T00:00:00"}
    two = {**row, "world_size": 2, "step_ms_median": 40.0, "created_at": "2026-01-01T00:01:00"}
    pd.DataFrame([row, two]).to_csv(run / "shard.csv", index=False)
    (run / "env.json").write_text('{"gpu_memory_gb": 139.8}')
    checked = check(root)
    mine = checked[checked.case.str.startswith(qwen_config)].iloc[0]
    assert mine.reason == "" and mine.compute_from == "your-model/h200-2026-01-01 (1 GPU)"
    assert mine.schedule_ms > 45.0 / 2 + 5.0 / 2  # half the batch's compute and half the optimizer, and waits
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["predict", "--model", qwen_config, "--gpus", "1,2,4", "--shard",
                                   "full,none", "--results", str(root), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    frame = pd.read_csv(out / "predict.csv")
    assert frame.step_ms.iloc[0] == pytest.approx(50.0)  # one GPU at the calibration's batch: itself
    assert frame.mem_gb_per_rank.iloc[0] == pytest.approx(2.0)
    full = frame[frame.shard == "full"]
    assert (full.mem_gb_per_rank.diff().dropna() < 0).all()  # the state spread over more ranks
    assert frame.tokens_per_s_per_gpu.gt(0).all() and frame.mfu.gt(0).all()
    missing = CliRunner().invoke(app, ["predict", "--model", "py:nowhere.py:make", "--results", str(root),
                                       "--out", str(out)])
    assert missing.exit_code == 2 and "no such file" in missing.output
