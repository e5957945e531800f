"""Multi-process code on the CPU: gloo, 2 and 4 ranks on loopback."""

import time

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.store import Store
from trainperf.distributed import launch as launch_module
from trainperf.distributed.launch import LaunchError, launch
from trainperf.models.lm import TransformerLM, lm_loss
from trainperf.workloads import comm
from trainperf.workloads.comm import BUS_FACTOR, parse_size
from trainperf.workloads.ddp import OPTIMIZERS, DataParallelStep, DDPSpec, global_batch

runner = CliRunner()
STEPS = 3


def spec(**kw):
    base = dict(variant="naive", model="tiny", world_size=2, bucket_mb=0.05, shard_optimizer=False,
                seq=16, batch=2, dtype="fp32", dist_backend="gloo", warmup=1, iters=2, lr=1e-2, vocab=64,
                optimizer="sgd")
    return DDPSpec(**{**base, **kw})


def single_process_params(s: DDPSpec, world: int) -> torch.Tensor:
    """Train on the whole global batch in one process: what every variant must reproduce."""
    torch.manual_seed(0)
    model = TransformerLM(s.model_config())
    opt = OPTIMIZERS[s.optimizer](model.parameters(), lr=s.lr)
    rows = global_batch(s, world, s.vocab)
    for _ in range(STEPS):
        lm_loss(model(rows[:, :-1]), rows[:, 1:]).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _train_variants(rank, world, cases, out_path):
    results = {}
    for name, s in cases:
        step = DataParallelStep(s, rank, world, torch.device("cpu"), s.variant)
        for _ in range(STEPS):
            step()
        full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in step.model.parameters()]
        results[name] = torch.cat([p.detach().flatten() for p in full])
    if rank == 0:
        torch.save(results, out_path)


@pytest.mark.parametrize("world, variants", [
    (2, ["naive", "flat", "overlap", "bucketed", "ddp", "fsdp2"]),
    (4, ["overlap", "bucketed", "ddp"]),
])
def test_every_variant_matches_single_process_training(tmp_path, world, variants):
    """SGD is scale-sensitive: a variant that summed instead of averaging gradients fails here."""
    cases = [(v, spec(variant=v, world_size=world)) for v in variants]
    cases += [(f"{v}+zero1", spec(variant=v, world_size=world, shard_optimizer=True))
              for v in ("flat", "bucketed")]
    out = tmp_path / "params.pt"
    launch(_train_variants, world, "gloo", args=(cases, str(out)))
    got = torch.load(out)
    reference = single_process_params(spec(), world)
    for name, _ in cases:
        torch.testing.assert_close(got[name], reference, rtol=1e-5, atol=1e-6, msg=f"{name} differs")


def test_with_compiled_layers_the_overlapping_variants_still_match_single_process_training(tmp_path):
    """Each layer's compiled backward hands its gradients over as it ends; the hooks that launch
    the all-reduces (overlap, bucketed, DDP's) still see every gradient, once."""
    cases = [(v, spec(variant=v, compile=True)) for v in ("overlap", "bucketed", "ddp")]
    out = tmp_path / "params.pt"
    launch(_train_variants, 2, "gloo", args=(cases, str(out)))
    got = torch.load(out)
    reference = single_process_params(spec(), 2)
    for name, _ in cases:
        torch.testing.assert_close(got[name], reference, rtol=1e-4, atol=1e-5, msg=f"{name} differs")


def _synced_grads(rank, world, cases, out_path):
    results = {}
    for name, s in cases:
        step = DataParallelStep(s, rank, world, torch.device("cpu"), s.variant)
        lm_loss(step.model(step.x), step.y).backward()
        step.sync.finish()
        grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                 for p in step.model.parameters()]
        results[name] = torch.cat([g.flatten() for g in grads])
        step.close()
    if rank == 0:
        torch.save(results, out_path)


def test_gradients_sent_in_bf16_arrive_as_bf16_values_close_to_the_fp32_mean(tmp_path):
    """With --reduce-dtype bf16 every variant's averaged gradient is a bf16 value (it crossed the
    wire as one) within bf16's rounding of the fp32 mean; with fp32 on the wire it is not."""
    variants = ["naive", "flat", "overlap", "bucketed", "fsdp2"]  # DDP's bf16 hook needs NCCL: below
    cases = [(v, spec(variant=v, reduce_dtype="bf16")) for v in variants] + [("fp32", spec(variant="naive"))]
    out = tmp_path / "grads.pt"
    launch(_synced_grads, 2, "gloo", args=(cases, str(out)))
    got = torch.load(out)
    mean = got.pop("fp32")
    assert not torch.equal(mean, mean.bfloat16().float())  # fp32 gradients are not all bf16 values
    for name, grads in got.items():
        assert torch.equal(grads, grads.bfloat16().float()), f"{name}: not sent as bf16"
        # bf16 keeps 8 bits: rounding both ranks' gradients and their sum moves the whole by ~2**-9
        assert (grads - mean).norm() / mean.norm() < 2**-7, f"{name} strays from the mean"


def test_ddp_with_bf16_gradients_on_gloo_is_an_unsupported_row_naming_nccl(db):
    res = runner.invoke(app, ["ddp", "--variant", "ddp,naive", "--reduce-dtype", "bf16", "--db", str(db),
                              "--quiet", "--iters", "1", "--warmup", "0"])
    assert res.exit_code == 0, res.output
    rows = {r.spec["variant"]: r for r in Store(db).records()}
    assert rows["naive"].status == "ok" and rows["naive"].spec["reduce_dtype"] == "bf16"
    assert rows["ddp"].status == "unsupported" and "NCCL" in rows["ddp"].reason


def test_sharded_adamw_matches_unsharded_adamw(tmp_path):
    """ZeRO-1 with AdamW: the same parameters as plain AdamW in one process (up to reduction order)."""
    cases = [("zero1", spec(variant="flat", shard_optimizer=True, optimizer="adamw", lr=1e-3))]
    out = tmp_path / "params.pt"
    launch(_train_variants, 2, "gloo", args=(cases, str(out)))
    reference = single_process_params(spec(optimizer="adamw", lr=1e-3), 2)
    torch.testing.assert_close(torch.load(out)["zero1"], reference, rtol=1e-4, atol=1e-5)


def _fail_on_rank_1(rank, world):
    if rank == 1:
        raise ValueError("rank 1 broke on purpose")
    dist.barrier()  # rank 0 would wait here forever without the launcher's teardown


def test_a_failing_rank_stops_the_run_with_a_clear_error():
    t0 = time.time()
    with pytest.raises(LaunchError, match="rank 1 failed first: ValueError: rank 1 broke on purpose"):
        launch(_fail_on_rank_1, 2, "gloo", timeout_s=30)
    assert time.time() - t0 < 60


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_are_correct_and_bandwidth_follows_nccl_tests(db, tmp_path, world):
    res = runner.invoke(app, ["comm", "--dist-backend", "gloo", "--world-size", str(world), "--bytes", "64KB",
                              "--iters", "3", "--warmup", "1", "--db", str(db), "--out", str(tmp_path),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    recs = Store(db).records(workload="comm")
    assert {r.spec["op"] for r in recs} == {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}
    for r in recs:
        assert r.status == "ok", r.reason
        m = r.metrics
        assert m["correct"] is True and m["time_ms_median"] > 0
        assert m["algbw_gbps"] == pytest.approx(m["bytes"] / (m["time_ms_median"] / 1e3) / 1e9)
        assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"] * BUS_FACTOR[r.spec["op"]](world))
    assert (tmp_path / "comm_busbw_gloo.png").exists()


def test_loop_and_per_call_timing_in_and_out_of_place(db, tmp_path):
    res = runner.invoke(app, ["comm", "--dist-backend", "gloo", "--world-size", "2", "--bytes", "64K",
                              "--op", "all_reduce,all_gather,reduce_scatter", "--timing", "loop,per-call",
                              "--in-place", "on,off", "--iters", "4", "--db", str(db), "--out", str(tmp_path),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    recs = {(r.spec["op"], r.spec["timing"], r.spec["in_place"]): r
            for r in Store(db).records(workload="comm")}
    assert len(recs) == 12
    for (op, timing, in_place), rec in recs.items():
        if op == "all_reduce" and not in_place:  # torch.distributed has no out-of-place all-reduce
            assert rec.status == "unsupported" and "works in place only" in rec.reason
            continue
        assert rec.status == "ok", rec.reason
        assert rec.metrics["correct"] is True and rec.spec["bytes"] == 65536
        assert rec.metrics["time_ms_n"] == (comm.LOOP_ROUNDS if timing == "loop" else 4)
        assert rec.metrics["time_us"] == pytest.approx(rec.metrics["time_ms_median"] * 1e3)
    loop = recs[("all_reduce", "loop", True)].metrics
    assert loop["busbw_gbps"] == pytest.approx(loop["algbw_gbps"])  # 2(n-1)/n = 1 for n = 2


def test_bus_factors_and_sizes():
    assert BUS_FACTOR["all_reduce"](8) == pytest.approx(1.75)
    assert BUS_FACTOR["all_gather"](4) == pytest.approx(0.75)
    assert BUS_FACTOR["broadcast"](8) == 1.0
    assert parse_size("1MB") == 10**6 and parse_size("1GiB") == 2**30 and parse_size("512") == 512
    assert parse_size("1M") == 2**20 and parse_size("4G") == 4 * 2**30 and parse_size("64k") == 65536
    assert comm.parse_sizes("8:64,1G") == [8, 16, 32, 64, 2**30]  # nccl-tests' -b 8 -e 64 -f 2
    assert comm.binary_size(2**20) == "1 MiB" and comm.binary_size(1536) == "1.5 KiB"
    with pytest.raises(ValueError):
        parse_size("-3MB")


def test_ddp_cli_names_compiled_cases_and_pairs_them_with_compiled_naive(db, tmp_path):
    res = runner.invoke(app, ["ddp", "--dist-backend", "gloo", "--world-size", "2", "--variant", "naive,ddp",
                              "--compile", "off,on", "--iters", "1", "--warmup", "1", "--seq", "16",
                              "--rounds", "2", "--db", str(db), "--out", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    recs = Store(db).records(workload="ddp")
    assert sorted((r.spec["variant"], r.spec["compile"], r.spec["round"]) for r in recs) == sorted(
        (v, c, n) for v in ("naive", "ddp") for c in (False, True) for n in (1, 2))
    rounds = pd.read_csv(tmp_path / "ddp_rounds.csv")
    assert sorted(zip(rounds.variant, rounds["compile"], rounds.rounds, strict=True)) == [
        ("ddp", False, 2), ("ddp", True, 2), ("naive", False, 2), ("naive", True, 2)]
    assert rounds.vs_naive.notna().sum() == 2  # each ddp row against the naive row of its own compile


def test_ddp_cli_records_variants_and_the_sharded_optimizer_saves_state(db):
    res = runner.invoke(app, ["ddp", "--dist-backend", "gloo", "--world-size", "2", "--variant", "flat,fsdp2",
                              "--shard-optimizer", "off,on", "--iters", "2", "--warmup", "1",
                              "--seq", "16", "--db", str(db), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "no fsdp2 case with --shard-optimizer on" in res.output
    recs = {(r.spec["variant"], r.spec["shard_optimizer"]): r for r in Store(db).records(workload="ddp")}
    assert set(recs) == {("flat", False), ("flat", True), ("fsdp2", False)}
    for r in recs.values():
        assert r.status == "ok", r.reason
        assert r.metrics["exposed_comm_ms"] >= 0 and 0 <= r.metrics["hidden_share"] <= 1
    full = recs[("flat", False)].metrics["opt_state_mb"]
    sharded = recs[("flat", True)].metrics["opt_state_mb"]
    assert sharded == pytest.approx(full / 2, rel=0.1)


def test_ddp_trains_with_fused_adamw_whole_sharded_and_over_fsdp2(db):
    res = runner.invoke(app, ["ddp", "--dist-backend", "gloo", "--world-size", "2", "--variant",
                              "naive,fsdp2", "--shard-optimizer", "off,on", "--optimizer", "adamw-fused",
                              "--iters", "1", "--warmup", "1", "--seq", "16", "--db", str(db), "--quiet"])
    assert res.exit_code == 0, res.output
    recs = Store(db).records(workload="ddp")
    assert len(recs) == 3 and all(r.status == "ok" and r.spec["optimizer"] == "adamw-fused" for r in recs)


def test_ddp_rejects_a_world_of_one(db):
    res = runner.invoke(app, ["ddp", "--dist-backend", "gloo", "--world-size", "1", "--db", str(db)])
    assert res.exit_code == 2 and "at least 2" in res.output


def test_world_size_eight_on_the_cpu(db, tmp_path):
    """The code paths of the eight-GPU run (collectives, DDP variants) at world size 8, with gloo."""
    res = runner.invoke(app, ["comm", "--dist-backend", "gloo", "--world-size", "8", "--bytes", "64KB",
                              "--op", "all_reduce,all_gather,reduce_scatter", "--iters", "2", "--warmup", "1",
                              "--db", str(db), "--out", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    recs = Store(db).records(workload="comm")
    assert len(recs) == 3 and all(r.status == "ok" and r.metrics["correct"] for r in recs)
    cases = [(v, spec(variant=v, world_size=8, batch=1)) for v in ("bucketed", "ddp")]
    out = tmp_path / "params.pt"
    launch(_train_variants, 8, "gloo", args=(cases, str(out)))
    reference = single_process_params(spec(batch=1), 8)
    for name, got in torch.load(out).items():
        torch.testing.assert_close(got, reference, rtol=1e-5, atol=1e-6, msg=f"{name} differs at 8 ranks")


def _abort_after_work(rank, world, marker):
    import os
    if rank == 1:
        open(marker, "w").close()
        os.abort()  # what a teardown crash looks like to the launcher, but before the done marker


def test_a_rank_that_dies_before_finishing_is_an_error(tmp_path):
    with pytest.raises(LaunchError, match="SIGABRT"):
        launch(_abort_after_work, 2, "gloo", args=(str(tmp_path / "m"),), timeout_s=30)


def _abort_at_exit(rank, world):
    import atexit
    import os
    if rank == 1:
        atexit.register(os.abort)  # dies in teardown, after its work is done


def test_a_rank_that_dies_in_teardown_after_finishing_is_a_warning(monkeypatch):
    # spawned, as ranks on GPUs are: a rank forked from the fork server (the CPU's) leaves through
    # os._exit, without the interpreter's teardown where such crashes happen
    monkeypatch.setattr(launch_module, "rank_context", lambda: torch.multiprocessing.get_context("spawn"))
    with pytest.warns(RuntimeWarning, match="all ranks finished their work, then .*SIGABRT"):
        launch(_abort_at_exit, 2, "gloo", timeout_s=30)


@pytest.mark.parametrize("link", ["shm", "socket"])
def test_a_link_other_than_nccl_s_choice_is_refused_on_gloo_naming_it(db, link):
    res = runner.invoke(app, ["ddp", "--dist-backend", "gloo", "--link", link, "--db", str(db)])
    assert res.exit_code == 2 and f"--link {link} picks an NCCL transport" in res.output
