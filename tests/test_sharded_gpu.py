"""The sharded step on two GPUs: replayed as a CUDA graph it trains as it does launched eagerly
(FSDP2 and DDP) and its peak memory counts what it holds; torchao's float8 inside FSDP2, the
decoder's Linears gathered in float8, trains on as the bf16 step does, and trainperf's float8
follows the bf16 step's losses."""

from __future__ import annotations

from importlib.util import find_spec

import pytest
import torch

from trainperf.distributed.launch import launch
from trainperf.distributed.supervisor import Supervisor
from trainperf.workloads.sharded import ShardedStep, ShardSpec, measure_sharded

two_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                              reason="needs two GPUs")
pytestmark = [pytest.mark.gpu, two_gpus]
STEPS = 4


def _losses(rank, world, cases, out_path):
    import torch.distributed as dist

    results = {}
    for name, s in cases:
        step = ShardedStep(s, rank, world, torch.device("cuda", rank))
        losses = []
        for _ in range(STEPS):
            loss = step().clone()
            dist.all_reduce(loss)
            losses.append(loss.item() / world)
        results[name] = losses
        del step
    if rank == 0:
        torch.save(results, out_path)


@pytest.mark.parametrize("shard", ["full", "none"])
def test_a_step_replayed_as_a_cuda_graph_trains_as_the_eager_step(tmp_path, shard):
    base = dict(model="small", world_size=2, shard=shard, checkpoint="full", seq=512, batch=4,
                optimizer="adamw-fused", compile=True, reshard_after_forward=False, lr=1e-3)
    cases = [(g, ShardSpec(**base, cuda_graph=g)) for g in (False, True)]
    launch(_losses, 2, "nccl", args=(cases, str(tmp_path / "r.pt")))
    got = torch.load(tmp_path / "r.pt")
    assert got[False][-1] < got[False][0]  # it trains
    assert got[True] == pytest.approx(got[False], rel=2e-3)


@pytest.mark.skipif(find_spec("torchao") is None or not torch.cuda.is_available()
                    or torch.cuda.get_device_capability() < (8, 9), reason="needs float8 GPUs and torchao")
def test_float8_gathered_by_fsdp2_trains_beside_the_bf16_step(tmp_path):
    from trainperf.core.store import Store

    specs = [ShardSpec(model="small", world_size=2, shard="full", checkpoint="none", seq=1024, batch=8,
                       optimizer="adamw-fused", float8=f, iters=3) for f in ("off", "torchao")]
    Supervisor("shard", measure_sharded, 2, "nccl", tmp_path / "r.db", {}, tmp_path / "logs",
               say=print).run(list(enumerate(specs)))
    recs = {r.spec["float8"]: r for r in Store(tmp_path / "r.db").records()}
    assert all(r.status == "ok" for r in recs.values()), [r.reason for r in recs.values()]
    assert recs["torchao"].metrics["step_ms_median"] > 0
    assert recs["torchao"].metrics["peak_mem_gb"] > 0


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                    reason="needs float8 GPUs")
def test_trainperf_s_float8_under_fsdp2_trains_as_the_bf16_step(tmp_path):
    base = dict(model="small", world_size=2, shard="full", checkpoint="full+attn", seq=512, batch=4,
                optimizer="adamw-fused", compile=True, lr=1e-3)
    cases = [(f, ShardSpec(**base, float8=f)) for f in ("off", "trainperf")]
    cases.append(("trainperf-head", ShardSpec(**{**base, "loss": "chunked"}, float8="trainperf-head")))
    launch(_losses, 2, "nccl", args=(cases, str(tmp_path / "r.pt")))
    got = torch.load(tmp_path / "r.pt")
    for f in ("trainperf", "trainperf-head"):
        assert got[f][-1] < got[f][0]  # it trains
        assert got[f] == pytest.approx(got["off"], rel=2e-2)


def test_a_graphed_step_holds_its_gradients_and_moments_beside_its_activations(tmp_path):
    """A replay allocates nothing, so a graphed rank's peak is its capture's plus AdamW's moments,
    which come after the capture; its gradients stay between steps, so it holds at least what the
    eager step holds. With the allocator's segments growing in place the eager step runs too."""
    from trainperf.core.store import Store

    base = dict(model="small", world_size=2, shard="full", checkpoint="full", seq=512, batch=4,
                optimizer="adamw-fused", compile=True, reshard_after_forward=False, iters=3)
    specs = [ShardSpec(**base, cuda_graph=g) for g in (False, True)]
    specs.append(ShardSpec(**base, expandable_segments=True))
    Supervisor("shard", measure_sharded, 2, "nccl", tmp_path / "r.db", {}, tmp_path / "logs",
               say=print).run(list(enumerate(specs)))
    recs = {(r.spec["cuda_graph"], r.spec["expandable_segments"]): r
            for r in Store(tmp_path / "r.db").records()}
    assert all(r.status == "ok" for r in recs.values()), [r.reason for r in recs.values()]
    eager, graphed = (recs[g, False].metrics["peak_mem_gb"] for g in (False, True))
    assert graphed >= 0.98 * eager
    assert recs[False, True].metrics["step_ms_median"] > 0
