"""Predictions of a model's step on many GPUs, per sharding choice, from the records of a results
tree: its one-GPU `shard` row (the calibration), its GPU's `comm` records, the network between
nodes (measured or given), and the contention fitted on every multi-GPU row the tree holds
(predict/check.py), whose check on that GPU's rows is each prediction's stated error."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.core.errors import SpecError
from trainperf.predict.check import (
    calibration,
    check,
    contention_of,
    links_by_gpu,
    measured_once,
    results_rows,
    shard_spec,
)
from trainperf.predict.model import Calibration, predict_sharded
from trainperf.predict.shape import parameters_of

COLUMNS = ["model", "gpus", "nodes", "shard", "batch_per_gpu", "step_ms", "tokens_per_s_per_gpu", "mfu",
           "exposed_comm_ms", "comm_ms", "mem_gb_per_rank", "fits", "contention",
           "checked_error_median", "checked_rows", "checked_mem_error_median", "inputs"]


def find_calibration(root: Path, model: str, gpu: str | None, choices: Mapping[str, Any]) -> Calibration:
    """The one-GPU `shard` row of `model` under `root` on a GPU whose name holds `gpu`, with the
    `choices` given (spec field → value): of those, the one with the most layers, then the latest.
    A SpecError in one line naming what to run where there is none."""
    ones = measured_once(results_rows(root, "shard"))
    ones = ones[(ones.world_size == 1) & (ones.model == model)] if not ones.empty else ones
    if gpu and not ones.empty:
        ones = ones[ones.env_gpu_name.str.contains(gpu, case=False, regex=False)]
    if not ones.empty:
        specs = ones.apply(shard_spec, axis=1)
        ones = ones[specs.map(lambda s: all(getattr(s, k) == v for k, v in choices.items()))]
    if ones.empty:
        given = "".join(f" --{k.replace('_', '-')} {v}" for k, v in choices.items())
        where = f" on a GPU named like {gpu!r}" if gpu else ""
        raise SpecError(f"no one-GPU shard record of {model}{where}{given} under {root}: run `trainperf "
                        f"shard --world-size 1 --model {model}{given}` (--layers K if it does not fit) first")
    layers = ones.apply(lambda r: parameters_of(shard_spec(r)).n_layers, axis=1)
    latest = ones.assign(_layers=layers).sort_values(["_layers", "created_at"], kind="stable").iloc[-1]
    return calibration(latest)


def predict_scaling(root: Path, cal: Calibration, gpus: Sequence[int], shards: Sequence[str],
                    gpus_per_node: int, inter_node_gbs: float | None,
                    batch_per_gpu: int | None = None) -> pd.DataFrame:
    """One row per sharding choice and GPU count (module doc)."""
    found = links_by_gpu(root)
    if cal.gpu not in found:
        raise SpecError(f"no `comm` records of {cal.gpu} (or of a GPU with its NVLink) under {root}: "
                        f"run `trainperf comm` on two or more of its GPUs first")
    links = found[cal.gpu].placed(gpus_per_node, inter_node_gbs)
    checked = check(root)
    contention = contention_of(checked)
    mine = checked[(checked.gpu == cal.gpu) & checked.step_error.notna()]
    per_gpu = batch_per_gpu or cal.spec.batch // cal.spec.world_size
    rows = []
    for shard in shards:
        for n in gpus:
            spec = replace(cal.spec, world_size=n, shard=shard, batch=per_gpu * n, layers=None)
            p = predict_sharded(spec, cal, links, contention)
            rows.append({"model": spec.model, "gpus": n, "nodes": -(-n // gpus_per_node), "shard": shard,
                         "batch_per_gpu": per_gpu, "step_ms": p.timeline.step_ms,
                         "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu, "mfu": p.mfu,
                         "exposed_comm_ms": p.timeline.exposed_comm_ms, "comm_ms": p.timeline.comm_ms,
                         "mem_gb_per_rank": p.mem_gb_per_rank, "fits": p.fits,
                         "contention": contention, "checked_error_median": mine.step_error.abs().median(),
                         "checked_rows": len(mine),
                         "checked_mem_error_median": mine.mem_error.abs().median(), "inputs": p.inputs})
    return pd.DataFrame(rows, columns=COLUMNS)


def draw(frame: pd.DataFrame, path: Path) -> Path:
    """Tokens/s per GPU against GPUs, one line per sharding choice."""
    from trainperf.core.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for shard, rows in frame.groupby("shard"):
        ax.plot(rows.gpus, rows.tokens_per_s_per_gpu, marker="o", label=shard)
    model = frame.model.iloc[0]
    ax.set(xscale="log", xlabel="GPUs", ylabel="tokens/s per GPU (predicted)",
           title=f"{model}: predicted scaling per sharding choice")
    ax.set_ylim(bottom=0)
    counts = sorted(frame.gpus.unique())
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.legend(title="shard")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
