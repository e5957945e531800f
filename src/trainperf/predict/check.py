"""The step model checked against measured multi-GPU rows: every ok `shard` and `ddp` row of a
results tree with more than one rank that has what its prediction needs, predicted from parts
measured apart from it, beside what was measured.

shard rows: the compute from a one-GPU `shard` row of the same model and choices (the same folder
first, then the same sharding (FSDP2 on one GPU pays its hooks and holds its state otherwise than
DDP), then the same tokens per rank, then the same run, then the most layers, then the latest),
the links from `comm` records of that GPU (else of a GPU with the same NVLink, named in the row).
ddp rows: their own parts, timed apart in the same case (`compute_ms`: the step without synchronisation;
`comm_alone_ms`: its collectives without compute), put together by the variant's schedule.
The one fitted number, the contention (predict/schedule.with_contention), is fitted for each row on
the other rows alone, so every error is one the fit never saw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainperf.core.errors import SpecError
from trainperf.core.flops import PASSES
from trainperf.models.presets import get_preset
from trainperf.models.source import is_model_source
from trainperf.predict.links import Links, links_from_records
from trainperf.predict.model import Calibration, predict_sharded
from trainperf.predict.schedule import Timeline, replicated_step
from trainperf.predict.shape import counted_parameters, parameters_of, preset_parameters
from trainperf.workloads.sharded import ShardSpec

# GPUs whose NVLink (and NVSwitch) is another's: its `comm` records stand in where a GPU has none.
SAME_LINKS = {"NVIDIA H200": "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3": "NVIDIA H200"}
# What a one-GPU row must share with the row it calibrates, besides the GPU.
MATCHED = ("model", "seq", "checkpoint", "compile", "float8", "cuda_graph", "dtype", "attention", "loss",
           "optimizer", "vocab")
OVERLAPPED = {"naive": False, "flat": False, "overlap": True, "bucketed": True, "ddp": True}
COLUMNS = ["run", "workload", "case", "world_size", "gpu", "step_ms_measured", "step_ms_predicted",
           "step_error", "exposed_comm_ms_measured", "exposed_comm_ms_predicted", "mem_gb_measured",
           "mem_gb_predicted", "mem_error", "schedule_ms", "hidden_comm_ms", "contention", "compute_from",
           "links_from", "reason"]
FITTED_ON = ("schedule_ms", "hidden_comm_ms", "step_ms_measured")
CONTENTIONS = np.linspace(0.0, 1.0, 101)  # the slowdowns tried (predict/schedule.with_contention)


def results_rows(root: Path, workload: str) -> pd.DataFrame:
    """Every `<workload>.csv` under `root`, each row with its folder, its run (the first two folders
    below `root`, e.g. shard/h200x4-2026-11-28) and its GPU's memory (from the nearest env.json)."""
    frames = []
    for path in sorted(root.rglob(f"{workload}.csv")):
        frame = pd.read_csv(path)
        rel = path.parent.relative_to(root)
        frame["folder"], frame["run"] = str(rel), str(Path(*rel.parts[:2]))
        frame["gpu_memory_gb"] = _gpu_memory_gb(path.parent, root)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _gpu_memory_gb(folder: Path, root: Path) -> float | None:
    for where in (folder, *folder.parents):
        env = where / "env.json"
        if env.is_file():
            return json.loads(env.read_text()).get("gpu_memory_gb")
        if where == root:
            break
    return None


def measured_once(rows: pd.DataFrame) -> pd.DataFrame:
    """The ok rows, each measurement once, in the first folder holding it (a suite's folders may
    share rows)."""
    if rows.empty:
        return rows
    ok = rows[rows.status == "ok"]
    return ok.drop_duplicates(subset=[c for c in ok.columns if c not in ("folder", "run", "gpu_memory_gb")])


def _value(row: pd.Series, name: str) -> Any:
    value = row.get(name)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def shard_spec(row: pd.Series) -> ShardSpec:
    """The ShardSpec a `shard` row measured (fields its file lacks take their defaults)."""
    given = {}
    for f in fields(ShardSpec):
        value = _value(row, f.name)
        if value is None:
            continue
        kind = str(f.type)
        if "bool" in kind:
            value = str(value).lower() in ("true", "1", "on")
        elif "int" in kind:
            value = int(value)
        elif "float" in kind:
            value = float(value)
        given[f.name] = value
    return ShardSpec(**given)


def calibration_for(row: pd.Series, ones: pd.DataFrame, specs: pd.Series) -> Calibration | None:
    """The one-GPU row (of `ones`, whose ShardSpecs are `specs`) that calibrates `row` (module
    doc), or None."""
    spec = shard_spec(row)
    wanted = [getattr(spec, name) for name in MATCHED]
    same = ones[(ones.env_gpu_name == row.env_gpu_name)
                & specs.map(lambda s: [getattr(s, name) for name in MATCHED] == wanted)]
    if same.empty:
        return None
    depth = parameters_of(spec).n_layers
    fewer_layers = specs[same.index].map(lambda s: depth - parameters_of(s).n_layers)
    other_tokens = same.batch // same.world_size != row.batch // row.world_size
    other_shard = same["shard"] != row["shard"]
    order = ((same.folder != row.folder) * 8 + other_shard * 4 + other_tokens * 2
             + (same.run != row.run)) * 1000 + fewer_layers
    latest = same.get("created_at", pd.Series("", index=same.index)).fillna("")
    ranked = pd.DataFrame({"order": order.astype(int), "latest": latest}).sort_values(
        ["order", "latest"], ascending=[True, False], kind="stable")
    return calibration(same.loc[ranked.index[0]])


def calibration(row: pd.Series) -> Calibration:
    """A one-GPU `shard` row as a Calibration: its forward and backward (the step less the
    optimizer where the row has no phase of its own), its optimizer, its peak memory, and for a
    model not a preset its counted FLOPs a token."""
    optimizer = _value(row, "optimizer_ms") or 0.0
    forward_backward = _value(row, "forward_backward_ms") or row.step_ms_median - optimizer
    per_token = None
    if str(_value(row, "flops_source") or "").startswith("counted"):
        per_token = row.model_tflop * 1e12 / PASSES["train"] / (row.batch * row.seq)
    return Calibration(shard_spec(row), forward_backward, optimizer, str(row.env_gpu_name),
                       f"{row.folder} (1 GPU)", _value(row, "peak_mem_gb"), _value(row, "gpu_memory_gb"),
                       per_token)


def links_by_gpu(root: Path) -> dict[str, Links]:
    """Each GPU's links from the `comm` records under `root` (module doc)."""
    comm = measured_once(results_rows(root, "comm"))
    found: dict[str, Links] = {}
    if comm.empty:
        return found
    for gpu, rows in comm.groupby("env_gpu_name"):
        runs = ", ".join(sorted(rows.run.unique()))
        found[str(gpu)] = links_from_records(rows.to_dict("records"), f"comm {runs}")
    for gpu, other in SAME_LINKS.items():
        if gpu not in found and other in found:
            found[gpu] = replace(found[other], source=f"{found[other].source} ({other}'s: the same NVLink)")
    return found


def check_shard(root: Path) -> Iterator[dict[str, Any]]:
    ok = measured_once(results_rows(root, "shard"))
    if ok.empty:
        return
    ones = ok[ok.world_size == 1]
    specs = ones.apply(shard_spec, axis=1) if not ones.empty else pd.Series(dtype=object)
    links = links_by_gpu(root)
    for _, row in ok[ok.world_size > 1].iterrows():
        spec = shard_spec(row)
        try:
            cal, link = calibration_for(row, ones, specs), links.get(str(row.env_gpu_name))
        except SpecError as exc:  # a model that cannot be built here (a py: file not in this tree)
            yield _compared(row, "shard", spec.label(), None, "", "", str(exc))
            continue
        if cal is None or link is None:
            choices = ", ".join(f"{name} {getattr(spec, name)}" for name in MATCHED)
            missing = f"no one-GPU shard row with {choices}" if cal is None else "no comm records"
            yield _compared(row, "shard", spec.label(), None, "", "", f"{missing} on {row.env_gpu_name}")
            continue
        p = predict_sharded(spec, cal, link)
        yield _compared(row, "shard", spec.label(), p.timeline, cal.source, link.source,
                        mem_gb=p.mem_gb_per_rank)


def check_ddp(root: Path) -> Iterator[dict[str, Any]]:
    ok = measured_once(results_rows(root, "ddp"))
    if ok.empty:
        return
    for _, row in ok[ok.world_size > 1].iterrows():
        if row.variant not in OVERLAPPED or _value(row, "comm_alone_ms") is None:
            continue
        n = ddp_buckets(row)
        t = replicated_step(row.compute_ms / 3, 2 * row.compute_ms / 3, [row.comm_alone_ms / n] * n,
                            overlap=OVERLAPPED[row.variant])
        link = row.get("link", "auto")
        label = f"{row.model} n={row.world_size} {row.variant} {row.batch}x{row.seq} link={link}"
        yield _compared(row, "ddp", label, t, f"{row.folder} (compute_ms)", f"{row.folder} (comm_alone_ms)")


def ddp_buckets(row: pd.Series) -> int:
    """How many all-reduces a `ddp` variant's gradients leave in: one per parameter (overlap), per
    bucket (bucketed, ddp), or one (naive's all come after the backward; flat's are one buffer)."""
    model = str(row.model)
    if is_model_source(model):
        params = counted_parameters(model, None, _value(row, "blocks"))
    else:
        vocab = get_preset(model).vocab or int(row.vocab)
        params = preset_parameters(ShardSpec(model, 1, "none", "none", int(row.seq), 1, vocab=vocab))
    if row.variant == "overlap":
        return params.tensors
    if row.variant in ("bucketed", "ddp"):
        return max(1, math.ceil(params.total * 4 / (float(row.bucket_mb) * 2**20)))
    return 1


def _compared(row: pd.Series, workload: str, case: str, t: Timeline | None, compute_from: str,
              links_from: str, reason: str = "", mem_gb: float | None = None) -> dict[str, Any]:
    """A row of the check; without a timeline, one the model cannot predict, and why. `mem_gb`:
    the peak memory a rank is predicted to hold, where the model predicts it."""
    nan = float("nan")
    measured_mem = _value(row, "peak_mem_gb")
    mem_error = mem_gb / measured_mem - 1 if mem_gb is not None and measured_mem else nan
    return {"run": row.run, "workload": workload, "case": case, "world_size": int(row.world_size),
            "gpu": row.env_gpu_name, "step_ms_measured": float(row.step_ms_median),
            "exposed_comm_ms_measured": _value(row, "exposed_comm_ms"),
            "exposed_comm_ms_predicted": t.exposed_comm_ms if t else nan,
            "mem_gb_measured": measured_mem if measured_mem is not None else nan,
            "mem_gb_predicted": mem_gb if mem_gb is not None else nan, "mem_error": mem_error,
            "schedule_ms": t.step_ms if t else nan, "hidden_comm_ms": t.hidden_comm_ms if t else nan,
            "compute_from": compute_from, "links_from": links_from, "reason": reason}


def fit_contention(schedule_ms: np.ndarray, hidden_ms: np.ndarray, measured_ms: np.ndarray) -> float:
    """The slowdown per ms of hidden communication (of CONTENTIONS) with the least median |error|."""
    predicted = schedule_ms[None, :] + CONTENTIONS[:, None] * hidden_ms[None, :]
    return float(CONTENTIONS[np.argmin(np.median(np.abs(predicted / measured_ms[None, :] - 1), axis=1))])


def _scheduled(root: Path) -> pd.DataFrame:
    return pd.DataFrame([*check_shard(root), *check_ddp(root)], columns=COLUMNS)


def check(root: Path) -> pd.DataFrame:
    """Predicted against measured for every multi-GPU row under `root` (module doc); the rows the
    model cannot predict stay, without a prediction, with the reason."""
    frame = _scheduled(root)
    values = [frame[c].to_numpy(float) for c in FITTED_ON]
    known = ~np.isnan(values[0])
    frame["contention"] = [fit_contention(*(v[known & (np.arange(len(frame)) != i)] for v in values))
                           if known[i] else np.nan for i in range(len(frame))]
    frame["step_ms_predicted"] = frame.schedule_ms + frame.contention * frame.hidden_comm_ms
    frame["step_error"] = frame.step_ms_predicted / frame.step_ms_measured - 1
    return frame


def contention_of(checked: pd.DataFrame) -> float:
    """The contention fitted on every row of a check that has a prediction (0 where none has)."""
    rows = checked.dropna(subset=["schedule_ms"])
    if rows.empty:
        return 0.0
    return fit_contention(*(rows[c].to_numpy(float) for c in FITTED_ON))


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per workload and GPU, and over all, of the rows predicted: rows, median |step error|, share
    within 10%, median |exposed communication error| in ms, median |peak memory error| (of the
    rows whose memory is predicted and measured)."""
    def stats(rows: pd.DataFrame) -> pd.Series:
        exposed = (rows.exposed_comm_ms_predicted - rows.exposed_comm_ms_measured).abs()
        return pd.Series({"rows": len(rows), "step_error_median": rows.step_error.abs().median(),
                          "within_10pct": (rows.step_error.abs() <= 0.1).mean(),
                          "exposed_comm_error_ms_median": exposed.median(),
                          "mem_error_median": rows.mem_error.abs().median()})

    predicted = frame.dropna(subset=["step_ms_predicted"])
    parts = [stats(rows).rename(key) for key, rows in predicted.groupby(["workload", "gpu"])]
    table = pd.DataFrame([*parts, stats(predicted).rename(("all", "all"))])
    table.index = pd.MultiIndex.from_tuples(table.index, names=["workload", "gpu"])
    return table.reset_index()


def draw(frame: pd.DataFrame, path: Path) -> Path:
    """Predicted against measured step, one point a row, the line of equality and ±10%."""
    from trainperf.core.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for (workload, gpu), rows in frame.groupby(["workload", "gpu"]):
        ax.scatter(rows.step_ms_measured, rows.step_ms_predicted, s=18, alpha=0.7,
                   label=f"{workload}, {str(gpu).removeprefix('NVIDIA ')}")
    low, high = frame.step_ms_measured.min() * 0.8, frame.step_ms_measured.max() * 1.25
    line = np.geomspace(low, high, 50)
    ax.plot(line, line, color="black", lw=1)
    ax.fill_between(line, line * 0.9, line * 1.1, color="grey", alpha=0.15, label="±10%")
    ax.set(xscale="log", yscale="log", xlabel="measured step ms", ylabel="predicted step ms",
           title=f"step model against {len(frame)} measured multi-GPU rows")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(plt.NullFormatter())
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
