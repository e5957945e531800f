"""torchao's float8 inside a step sharded by FSDP2 on two GPUs: the decoder's Linears gathered in
float8, training on as the bf16 step does."""

from __future__ import annotations

from importlib.util import find_spec

import pytest
import torch

from trainperf.distributed.supervisor import Supervisor
from trainperf.workloads.sharded import ShardSpec, measure_sharded

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2 or find_spec("torchao") is None
    or torch.cuda.get_device_capability() < (8, 9), reason="needs two float8 GPUs and torchao")]


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
