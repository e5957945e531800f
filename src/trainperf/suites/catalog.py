"""The named benchmark suites: each is data (commands and their options on a GPU, and a tiny form
for the CPU), run by `trainperf suite run NAME` through the same commands a user types."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from trainperf.core.stats import ratio_se

GPUS = "{gpus}"  # an option value filled in with the number of GPUs of the machine


@dataclass(frozen=True)
class Part:
    """One command of a suite. Its files go to `<suite folder>/<name>/`."""

    name: str
    command: tuple[str, ...]
    gpu: dict[str, str | bool]
    cpu: dict[str, str | bool]
    min_gpus: int = 1  # on a GPU machine with fewer, the part is left out (and said so)
    stored: bool = True  # a workload command (results store, --rerun, --quiet); False for a profile
    needs: str = ""  # an optional package (import name) without which the part is left out (and said so)

    def argv(self, on_gpu: bool, gpus: int | str) -> list[str]:
        """The command line of this part on a machine with `gpus` GPUs."""
        args = list(self.command)
        for flag, value in (self.gpu if on_gpu else self.cpu).items():
            if value is True:
                args.append(flag)
            elif value is not False:  # "1,{gpus}" on one GPU is "1", not "1,1"
                items = str(value).replace(GPUS, str(gpus)).split(",")
                args += [flag, ",".join(dict.fromkeys(items))]
        return args


Headline = Callable[[dict[str, Path]], pd.DataFrame]
SuitePlot = Callable[[dict[str, Path], Path], None]  # part folders, the suite's folder it draws into


@dataclass(frozen=True)
class Suite:
    name: str
    about: str
    parts: tuple[Part, ...]
    headline: Headline  # part folders -> the table at the top of the suite's report
    caption: str  # what the headline table's numbers are
    multi_gpu: bool = False  # the folder is named after the GPU count too (h200x2)
    plot: SuitePlot | None = None  # a figure across the parts, beside the headline


def _read(folder: Path, name: str) -> pd.DataFrame:
    path = folder / name
    return pd.read_csv(path) if path.exists() else pd.DataFrame()


def _cell(df: pd.DataFrame, value: str, digits: int = 3) -> pd.Series:
    """A number column, or the status where a case has no number (oom, unsupported)."""
    if value not in df:  # no case measured it
        return df["status"]
    numbers = df[value].map(lambda v: f"{v:.{digits}g}" if pd.notna(v) else "")
    return numbers.where(df["status"] == "ok", df["status"])


def llama_headline(parts: dict[str, Path]) -> pd.DataFrame:
    from trainperf.workloads.llama_sdpa import summary_table

    table = _read(parts["llama"], "training_timing.csv")
    return summary_table(table) if not table.empty else table


def shape_labels(df: pd.DataFrame) -> list[str]:
    """'B1 H16 N16384 D64' for each row of an attention table."""
    return [f"B{r.batch} H{r.heads} N{r.seq} D{r.head_dim}" for r in df.itertuples()]


def attention_headline(parts: dict[str, Path]) -> pd.DataFrame:
    df = pd.concat([_read(folder, "attention.csv") for folder in parts.values()], ignore_index=True)
    if df.empty:
        return df
    df["shape"] = shape_labels(df)
    df["ms (TFLOP/s)"] = _cell(df, "time_ms_median") + df.get("tflops", pd.Series(dtype=float)).map(
        lambda t: f" ({t:.3g})" if pd.notna(t) else "") + [
        f"; kernels {k:.3g}, host {h:.3g}" if pd.notna(k) and pd.notna(h) else ""
        for k, h in df.reindex(columns=["kernel_ms", "host_ms"]).itertuples(index=False)]
    return df.pivot_table(index="attention", columns="shape", values="ms (TFLOP/s)", aggfunc="first",
                          sort=False).reset_index()


def _step_table(parts: dict[str, Path], metrics: tuple[tuple[str, str, int], ...],
                files: tuple[str, ...] = ("step.csv",)) -> pd.DataFrame:
    """One row per step case of every part (its `files`): what names it, its median step, then
    `metrics` (column, header, significant digits) where they were measured. A `shard` row says
    how it was sharded."""
    df = pd.concat([_read(folder, name) for folder in parts.values() for name in files], ignore_index=True)
    if df.empty:
        return df
    out = df[[c for c in ("model", "seq", "batch", "dtype", "compile", "recipe") if c in df]].copy()
    if "world_size" in df:
        sharded = df.world_size.notna()
        out["sharded"] = (df.shard.astype(str) + " over " + df.world_size.astype("Int64").astype(str)
                          + " ranks, checkpoint " + df.checkpoint.astype(str)
                          + ", loss " + df["loss"].astype(str)).where(sharded, "")
    out["step ms"] = _cell(df, "step_ms_median")
    for col, name, digits in metrics:
        if col in df:
            out[name] = df[col].map(lambda v, d=digits: f"{v:.{d}g}" if pd.notna(v) else "")
    if "blocks_found" in df:
        out["blocks"] = df["blocks_found"].fillna("")
    return out.drop_duplicates()  # a case two parts share is one row


def step_headline(parts: dict[str, Path]) -> pd.DataFrame:
    return _step_table(parts, (("tokens_per_s", "tokens/s", 3), ("mfu", "MFU", 3)))


def your_model_headline(parts: dict[str, Path]) -> pd.DataFrame:
    """One row per model, compile choice, recipe and sharding: its step, throughput, counted MFU,
    memory, blocks."""
    return _step_table(parts, (("tokens_per_s", "tokens/s", 5), ("mfu", "MFU (counted FLOPs)", 3),
                               ("peak_mem_gb", "peak GB", 3)), files=("step.csv", "shard.csv"))


def peers_headline(parts: dict[str, Path]) -> pd.DataFrame:
    """One row per recipe: seconds per iteration (peak GB) at each shape, then its loss parity;
    and the fastest step against the best of the peers its target names, then of every peer."""
    return recipes_headline(parts, [("fast", peers) for peers in (PEERS, PEERS + FA4_PEERS)])


def float8_headline(parts: dict[str, Path]) -> pd.DataFrame:
    """peers_headline's table for the float8 recipes: the steps with trainperf's float8 (on every
    Linear, on every decoder Linear, on the MLP alone) against the same step with torchao's float8
    (`fp8`), the widest against the next (what the LM head's float8 brings), and trainperf's float8
    on every decoder Linear against the bf16 fastest step; under it, on Llama-3.1-8B's layers, the
    float8 step with its attention in float8 too against the same step on FlashAttention 4."""
    main = recipes_headline(parts, [("fp8-trainperf-head", ("fp8",)),
                                    ("fp8-trainperf-head", ("fp8-trainperf-all",)),
                                    ("fp8-trainperf-all", ("fp8",)), ("fp8-trainperf-all", ("fast",)),
                                    ("fp8-trainperf", ("fp8",))])
    attention = recipes_headline(parts, [("fp8-trainperf-attn", ("fp8-trainperf-all",))],
                                 timing=("attention",), parity="attention-parity")
    if attention.empty:
        return main
    tables = [("Llama-3.2-1B", main), ("Llama-3.1-8B's layers", attention)]
    return pd.concat([t.assign(model=name) for name, t in tables if not t.empty], ignore_index=True).pipe(
        lambda t: t[["model", *t.columns.drop("model")]].fillna("-"))


def recipes_headline(parts: dict[str, Path], against: list[tuple[str, tuple[str, ...]]],
                     timing: tuple[str, ...] = ("llama", "llama-more"),
                     parity: str = "parity") -> pd.DataFrame:
    """One row per recipe of the `timing` parts: seconds per iteration (peak GB, J) at each shape,
    then its loss parity (the `parity` part; a recipe it alone trained gets a row of its own); and
    a row for each (recipe, others) of `against`: its speed-up over the best of the others at each
    shape, where the recipe ran."""
    from trainperf.workloads.llama_sdpa import recipe_names

    frames = [_read(parts[p], "training_timing.csv") for p in timing if p in parts]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    out = pd.DataFrame(index=pd.Index([], name="recipe"))
    if not table.empty:
        table["recipe"] = recipe_names(table)
        table["case"] = table.batch_size.astype(str) + "x" + table.seq_len.astype(str)
        energy = table["energy_j_per_iter"] if "energy_j_per_iter" in table else [float("nan")] * len(table)
        table["cell"] = _cell(table, "mean_s") + [_bracket(g, j) for g, j in zip(table.peak_mem_gb, energy,
                                                                                  strict=True)]
        out = table.pivot_table(index="recipe", columns="case", values="cell", aggfunc="first", sort=False)
        ok = table[table.status == "ok"]
        ran = set(ok.recipe)
        for recipe, others in (pair for pair in against if pair[0] in ran):  # rows only where it ran
            out.loc[f"{recipe} vs the best of {', '.join(others)}"] = _against_best(ok, recipe, others)
    losses = _parity_losses(parts[parity])[0] if parity in parts else pd.DataFrame()
    if not losses.empty:
        from trainperf.workloads.parity import deviation_text, parity_table

        judged = parity_table(losses).set_index("recipe")  # stock, the reference, gets no row of its own
        out = out.reindex([*out.index, *(r for r in judged.index if r not in out.index and r != "stock")])
        out["largest deviation from stock"] = judged.apply(deviation_text, axis=1)
        out["deviation over the last fifth"] = judged.final_rel_dev.map(
            lambda d: f"{d:.2%}" if pd.notna(d) else "")
        band = band_verdicts(parts[parity])
        if not band.empty:
            out["loss against stock's band"] = band.reindex(out.index).fillna("-")
    return out.fillna("-").reset_index() if len(out) else pd.DataFrame()


def _parity_losses(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A parity part's step x run losses, with each run's first run of its draw in
    attrs["first_runs"] as `trainperf parity` had them, and its records (runs from before
    draws existed are of draw 1)."""
    from trainperf.workloads.parity import first_runs

    records, losses = _read(folder, "parity.csv"), _read(folder, "parity_losses.csv")
    if losses.empty:
        return losses, records
    if "draw" not in records:
        records = records.assign(draw=1)
    losses = losses.set_index("step")
    losses.attrs["first_runs"] = first_runs(dict(zip(records.run, records.draw, strict=True)))
    return losses, records


def band_verdicts(folder: Path) -> pd.Series:
    """Per recipe, its runs judged against stock's band (the part's parity_band.csv): "within in
    all 2 run(s)", or how many were within, outside (from which step) and undecided (stock's band
    deciding nothing): "of 4 run(s): 3 within, 1 undecided (...)"; then the runs' largest
    deviation in stock's spreads, the yardstick of the verdicts; empty without the file."""
    judged = _read(folder, "parity_band.csv")
    if judged.empty:
        return pd.Series(dtype=str)
    if "band_dev_max" not in judged:
        judged["band_dev_max"] = float("nan")

    def summary(runs: pd.DataFrame) -> str:
        within = runs.verdict.str.startswith("within").sum()
        worst = runs.band_dev_max.max()
        at_most = f"; at most {worst:.1f} spreads" if pd.notna(worst) else ""
        if within == len(runs):
            return f"within in all {len(runs)} run(s){at_most}"
        out = runs[runs.verdict.str.startswith("outside")]
        undecided = runs.verdict.str.startswith("undecided").sum()
        counts = [(within, "within"),
                  (len(out), f"outside (from step {int(out.left_at.min())})" if len(out) else ""),
                  (undecided, "undecided (stock's band decides nothing)")]
        return (f"of {len(runs)} run(s): " + ", ".join(f"{n} {verdict}" for n, verdict in counts if n)
                + at_most)

    return judged.groupby("recipe", sort=False)[["verdict", "left_at", "band_dev_max"]].apply(summary)


def draws_headline(parts: dict[str, Path]) -> pd.DataFrame:
    """One row per recipe, a column per draw of the parity task: the largest deviation of the
    recipe's smoothed loss from stock's run of that draw (or the status of a run that did not
    finish), then its runs judged against stock's band."""
    from trainperf.workloads.parity import run_deviations

    losses, records = _parity_losses(parts["parity"])
    if losses.empty:
        return losses
    draw_of = dict(zip(records.run, records.draw, strict=True))
    devs = run_deviations(losses)
    devs = devs[devs.recipe != "stock"].assign(draw=devs.run.map(draw_of))
    devs["cell"] = [f"{d:.2%}" if pd.notna(d) else "no reference" for d in devs.max_rel_dev]
    failed = records[(records.status != "ok") & (records.recipe != "stock")]
    cells = pd.concat([devs[["recipe", "draw", "cell"]],
                       failed.assign(cell=failed.status)[["recipe", "draw", "cell"]]], ignore_index=True)
    out = cells.pivot_table(index="recipe", columns="draw", values="cell", aggfunc="first", sort=False)
    out.columns = [f"draw {d}" for d in out.columns]
    band = band_verdicts(parts["parity"])
    if not band.empty:
        out["against stock's band"] = band.reindex(out.index).fillna("-")
    return out.reset_index()


def _bracket(peak_gb: float, energy_j: float) -> str:
    """' (peak GB, J per iteration)', of what a case has; results from before energy was read have
    only the memory."""
    shown = [text for value, text in ((peak_gb, f"{peak_gb:.1f} GB"), (energy_j, f"{energy_j:.0f} J"))
             if pd.notna(value)]
    return f" ({', '.join(shown)})" if shown else ""


def _parity_part(recipes: str, cpu_recipes: str, times: str, gpu_times: int, seeds: int = 4) -> Part:
    """A `parity` part: `recipes` trained 300 AdamW steps at the model's full depth, `gpu_times`
    draws or repeats (`times`), beside stock's band (its runs from `seeds` seeds), the runs shared
    out over every GPU of the machine; on the CPU `cpu_recipes` 4 steps, twice, beside stock's from
    two seeds."""
    return Part("parity", ("parity",),
                gpu={"--recipe": recipes, "--train-steps": "300", "--stock-seeds": str(seeds),
                     times: str(gpu_times), "--jobs": GPUS},
                cpu={"--recipe": cpu_recipes, "--train-steps": "4", "--seq": "16", "--batch": "2",
                     "--dtype": "fp32", "--stock-seeds": "2", times: "2"})


PEERS = ("compile", "liger", "liger-compile")  # the peers of the fastest step's performance target
FA4_PEERS = ("fa4", "liger-fa4")


def _against_best(ok: pd.DataFrame, recipe: str, peers: tuple[str, ...]) -> pd.Series:
    """Per shape: the best peer's time over `recipe`'s (its speed-up, ± its standard error where the
    rows have their iterations' spread and count), and `recipe`'s peak memory and energy per
    iteration over that peer's (under a power cap, time follows energy); said when the two rows
    were measured on different GPUs (a suite resumed on another machine), which no speed-up
    survives."""
    cells = {}
    for case, df in ok.groupby("case", sort=False):
        rows = df.set_index("recipe")
        best = rows.loc[rows.index.isin(peers), "mean_s"]
        if recipe in rows.index and not best.empty:
            mine, peer = rows.loc[recipe], rows.loc[best.idxmin()]
            ratios = {what: mine.get(col, float("nan")) / peer.get(col, float("nan"))
                      for what, col in (("memory", "peak_mem_gb"), ("energy", "energy_j_per_iter"))}
            notes = [f"{what} {r:.2f}x" for what, r in ratios.items() if pd.notna(r)]
            uuids = (mine.get("gpu_uuid"), peer.get("gpu_uuid"))
            if all(pd.notna(u) for u in uuids) and uuids[0] != uuids[1]:
                notes.append("on two different GPUs")
            se = ratio_se(*(tuple(row.get(k, float("nan")) for k in ("mean_s", "std_s", "iters"))
                            for row in (peer, mine)))
            ratio = peer.mean_s / mine.mean_s
            told = f"{ratio:.3f}x ± {se:.3f}" if pd.notna(se) else f"{ratio:.2f}x"
            cells[case] = told + f" over {best.idxmin()}" + (f" ({'; '.join(notes)})" if notes else "")
    return pd.Series(cells, dtype=object)


PHASES = ("fwd", "bwd", "optimizer")  # the profile ranges every recipe has, compiled ones too


def _explain_times(parts: dict[str, Path]) -> pd.DataFrame:
    """Kernel milliseconds per kind of kernel, their total and per phase (rows), per recipe
    (columns), from each profile part that ran. The headline and the figure both ask for it: the
    profiles are read once per version of their files."""
    profiles = []
    for name, folder in parts.items():
        found = sorted(folder.glob("*.json")) if folder.is_dir() else []
        if found:
            profiles.append((name.removeprefix("profile-"), found[0], found[0].stat().st_mtime_ns))
    return _profile_times(tuple(profiles)).copy()


@functools.lru_cache(maxsize=4)
def _profile_times(profiles: tuple[tuple[str, Path, int], ...]) -> pd.DataFrame:
    """_explain_times from (recipe, profile JSON, its modification time) triples."""
    from trainperf.profiling.kernel_kinds import time_by_kind
    from trainperf.profiling.session import load_breakdown

    times = {}
    for recipe, path, _ in profiles:
        breakdown = load_breakdown(path)[0]
        kinds = time_by_kind(breakdown.kernels)
        ranges = breakdown.ranges.set_index("range").kernel_ms
        phases = pd.Series({f"{p} range": ranges.get(p, float("nan")) for p in PHASES})
        total = pd.Series({"total": kinds.sum()})
        times[recipe] = pd.concat([kinds, total, phases])
    return pd.DataFrame(times)


def explain_headline(parts: dict[str, Path]) -> pd.DataFrame:
    """One row per kind of kernel (and their total), then one per phase of the step (forward,
    backward, optimizer: which ranges got faster), a column per recipe: kernel milliseconds in one
    profiled iteration, and in brackets the speed-up over stock's of that row."""
    df = _explain_times(parts)
    if df.empty:
        return df
    stock = df.get("stock")

    def cell(row: str, ms: float) -> str:
        if pd.isna(ms):
            return ""
        base = stock[row] if stock is not None else float("nan")
        return f"{ms:.1f}" + (f" ({base / ms:.2f}x)" if ms and pd.notna(base) and base else "")

    cells = {recipe: [cell(row, ms) for row, ms in col.items()] for recipe, col in df.items()}
    return pd.DataFrame(cells, index=df.index).rename_axis("kernels").reset_index()


def explain_plot(parts: dict[str, Path], folder: Path) -> None:
    """Each recipe's kernel time as one bar stacked by kind of kernel, its total and speed-up over
    stock written past its end: `kernel_time_by_kind.png`."""
    from trainperf.core.plots import stacked_bars
    from trainperf.profiling.kernel_kinds import KINDS, OTHER

    df = _explain_times(parts)
    if df.empty:
        return
    totals = df.loc["total"]
    stock = totals.get("stock", float("nan"))
    labels = {r: f"{ms:.0f} ms" + (f" ({stock / ms:.2f}x)" if pd.notna(stock) and ms else "")
              for r, ms in totals.items()}
    kinds = df.loc[[kind for kind, _ in KINDS] + [OTHER]].T
    stacked_bars(kinds, folder / "kernel_time_by_kind.png", "kernel ms in one profiled iteration",
                 "Where each recipe's time goes (speed-up over stock)", labels)


def kernels_headline(parts: dict[str, Path]) -> pd.DataFrame:
    """One row per kernel part, a column per implementation: ms per call, and the speed-up over the
    PyTorch reference of that part in brackets."""
    df = _read(parts["kernels"], "kernels.csv")
    if df.empty:
        return df
    from trainperf.workloads.kernels import parts_and_impls

    df["part"], df["impl"] = parts_and_impls(df.kernel)
    ref = df[df.impl == "torch"].set_index("part")["time_ms_median"]
    speedup = df.part.map(ref) / df.time_ms_median
    df["cell"] = _cell(df, "time_ms_median") + speedup.map(lambda x: f" ({x:.2f}x)" if pd.notna(x) else "")
    table = df.pivot_table(index="part", columns="impl", values="cell", aggfunc="first", sort=False)
    return table.reset_index()


def cudnn_headline(parts: dict[str, Path]) -> pd.DataFrame:
    """Each PyTorch choice beside its cuDNN counterpart: the study's ranges (8B forward) and the
    training iteration's phases, the norm and the attention in the Llama step, the attention op."""
    from trainperf.profiling.cudnn_study import STUDY_RANGES

    rows = []
    for phase, wanted in (("forward", STUDY_RANGES), ("step", ("fwd", "bwd", "step"))):
        study = _read(parts["study"], f"cudnn_study_{phase}.csv")
        for r in study[study["range"].isin(wanted)].to_dict("records") if not study.empty else ():
            rows.append((f"8B {phase}, range", r["range"],
                         f"{r['PyTorch ms']:.3g} ({r['PyTorch kernels']:.0f})",
                         f"{r['cuDNN ms']:.3g} ({r['cuDNN kernels']:.0f})", r["PyTorch ms"] / r["cuDNN ms"]))
    llama = _read(parts["llama"], "training_timing.csv")
    fast = _read(parts["fast"], "training_timing.csv")
    rows += _pair_rows(llama, "norm (step s)", (False, "none"), (False, "norm=cudnn"))
    rows += _pair_rows(llama, "attention (step s)", (False, "none"), (True, "none"))
    rows += _pair_rows(fast, "fast step (s)", (False, "loss=chunked"), (True, "loss=chunked"),
                       compile="layers")
    attention = _read(parts["attention"], "attention.csv")
    if not attention.empty:
        attention["case"] = shape_labels(attention)
        for case, df in attention.groupby("case", sort=False):
            ms = df.set_index("attention")["time_ms_median"]
            if {"sdpa-cudnn", "cudnn-fe"} <= set(ms.index):
                rows.append(("attention op (ms)", case, f"{ms['sdpa-cudnn']:.3g}", f"{ms['cudnn-fe']:.3g}",
                             ms["sdpa-cudnn"] / ms["cudnn-fe"]))
    out = pd.DataFrame(rows, columns=["comparison", "case", "PyTorch", "cuDNN", "speed-up"])
    out["speed-up"] = out["speed-up"].map(lambda x: f"{x:.2f}x" if pd.notna(x) else "")
    return out


def _pair_rows(llama: pd.DataFrame, label: str, stock: tuple[bool, str], cudnn: tuple[bool, str],
               compile: str = "off") -> list[tuple]:
    """Per shape, the row of a llama table (compiled as `compile`) keyed `stock` beside the one keyed
    `cudnn`; a key is (whether the attention is CUDNN_FE, the swaps)."""
    if llama.empty:
        return []
    llama = llama.assign(swaps=llama.swaps.astype(object).fillna("none"),
                         case=llama.batch_size.astype(str) + "x" + llama.seq_len.astype(str))
    rows = []
    for case, df in llama.groupby("case", sort=False):
        cells = {(r.backend == "CUDNN_FE", r.swaps): r for r in df.itertuples() if r.compile == compile}
        a, b = cells.get(stock), cells.get(cudnn)
        if a is not None and b is not None:
            speed = a.mean_s / b.mean_s if a.status == b.status == "ok" else None
            rows.append((label, case, _one(a), _one(b), speed))
    return rows


def _one(r) -> str:  # noqa: ANN001
    return f"{r.mean_s:.3g}" if r.status == "ok" else r.status


def _at_defaults(frame: pd.DataFrame, workload: str) -> None:
    """Fill in place the settings a table's older rows predate with the value they were measured at."""
    from trainperf.core.legacy import ADDED_FIELDS

    for key, value in ADDED_FIELDS[workload].items():
        if key in frame:
            frame[key] = frame[key].fillna(value)


def shard_headline(parts: dict[str, Path]) -> pd.DataFrame:
    df = pd.concat([_read(folder, "shard.csv") for folder in parts.values()], ignore_index=True)
    if df.empty:
        return df
    _at_defaults(df, "shard")
    knobs = [c for c in ("optimizer", "prefetch", "reshard_after_forward") if c in df]
    varied = ("unit_layers", "reduce_dtype", "cuda_graph", "attention", "float8")  # shown where cases differ
    knobs += [c for c in varied if c in df and df[c].nunique() > 1]
    out = df[["model", "world_size", "shard", "checkpoint", "loss", "compile", *knobs]].copy()
    out["tokens"] = df["batch"].astype(str) + " x " + df["seq"].astype(str)
    step_s = df["step_ms_median"] / 1e3 if "step_ms_median" in df else pd.Series(float("nan"), df.index)
    out["step s"] = _cell(df.assign(step_s=step_s), "step_s")
    for col, name in (("exposed_comm_ms", "exposed comm ms"), ("exposed_comm_least_ms", "least exposed ms"),
                      ("exposed_comm_host_ms", "host-late ms"), ("optimizer_ms", "optimizer ms"),
                      ("mfu", "MFU"), ("mfu_at_clock", "MFU at clock"), ("hfu", "HFU"),
                      ("fp8_peak_share", "fp8 peak share"), ("peak_mem_gb", "peak GB per rank")):
        if col in df:  # a column records from before it existed lack
            out[name] = df[col].map(lambda v: f"{v:.3g}" if pd.notna(v) else "")
    return out.drop_duplicates()  # a case two parts share is one row


def comm_headline(parts: dict[str, Path]) -> pd.DataFrame:
    df = _read(parts["comm"], "comm.csv")
    if df.empty:
        return df
    df["MiB"] = df["bytes"] / 2**20
    df["busbw GB/s"] = _cell(df, "busbw_gbps")
    return df.pivot_table(index=["op", "world_size", "in_place"], columns="MiB", values="busbw GB/s",
                          aggfunc="first").reset_index()


def ddp_headline(parts: dict[str, Path]) -> pd.DataFrame:
    """One row per setup (variant, bucket size, ZeRO-1, link, compile, gradients' dtype, model,
    batch, world size) over the parts: its step over the rounds (median ± the 95% interval), the
    trace's medians, and its lead over naive sync where one is established; a setup two parts
    share is one row."""
    from trainperf.workloads.ddp_rounds import SETUP

    records = pd.concat([_read(folder, "ddp.csv") for folder in parts.values()], ignore_index=True)
    if records.empty:
        return records
    rounds = pd.concat([_read(folder, "ddp_rounds.csv") for folder in parts.values()], ignore_index=True)
    for frame in (records, rounds):
        _at_defaults(frame, "ddp")
    setup = [k for k in SETUP if k in records and k in rounds]  # older tables lack later settings
    records = records.drop_duplicates(subset=[*setup, "round"] if "round" in records else None)
    ok = records[records.status == "ok"]
    by_setup = records.groupby(setup, dropna=False, sort=False)
    out = by_setup.status.agg(lambda s: "ok" if (s == "ok").any() else s.iloc[0]).reset_index()
    traced = ok.groupby(setup, dropna=False)[[c for c in DDP_TRACE if c in ok]].median().reset_index()
    out = out.merge(traced, on=setup, how="left").merge(
        rounds.drop_duplicates(subset=setup)[[*setup, "rounds", "step_ms_median", "step_ms_ci95", "lead"]],
        on=setup, how="left")
    step = out.step_ms_median.map(lambda v: f"{v:.0f}" if pd.notna(v) else "")
    step += out.step_ms_ci95.map(lambda v: f" ± {v:.0f}" if pd.notna(v) else "")
    shown = ("variant", "model", "world_size", "link", "compile", "reduce_dtype", "bucket_mb",
             "shard_optimizer", "rounds")
    table = out[[c for c in shown if c in out]].copy()
    if {"batch", "seq"} <= set(records):
        shapes = by_setup[["batch", "seq"]].first()
        table.insert(2, "batch x seq", shapes.apply(lambda r: f"{r.batch}x{r.seq}", axis=1).to_numpy())
    table["step ms"] = step.where(out.status == "ok", out.status)
    for col, name in DDP_TRACE.items():
        if col in out:
            table[name] = _cell(out, col)
    table["lead over naive"] = out.lead.fillna("")
    return table


DDP_TRACE = {"compute_ms": "compute ms", "nccl_ms": "NCCL ms", "exposed_comm_ms": "exposed ms",
             "exposed_comm_least_ms": "least exposed ms", "exposed_comm_host_ms": "host-late ms",
             "hidden_share": "hidden",
             "opt_state_mb": "opt state MB"}


_TINY = {"--warmup": "1", "--iters": "2"}
FLOAT8_ATTENTION_RECIPES = "fp8-trainperf-all,fp8-trainperf-attn"
_DDP_COMPILED = {"--world-size": f"2,{GPUS}", "--model": "xl", "--variant": "naive,overlap,bucketed,ddp",
                 "--compile": "on", "--batch": "8", "--seq": "1024"}
_DDP_COMPILED_CPU = {"--world-size": "2", "--variant": "naive,ddp", "--compile": "on", "--seq": "16",
                     "--warmup": "1", "--iters": "1"}
_LEADERBOARD = {"--model": "cs336-8b", "--world-size": GPUS, "--seq": "32768", "--batch": "2",
                "--loss": "chunked", "--optimizer": "adamw-fused", "--warmup": "1", "--iters": "4"}
_XL_LONG = {"--model": "xl", "--seq": "2048", "--batch": "8", "--checkpoint": "full", "--warmup": "2",
            "--iters": "5"}
SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("seed-llama",
          "Llama-3.2-1B training iteration (random init, SGD) at the six batch x sequence pairs of 16k "
          "tokens, with the cuDNN, flash and efficient SDPA backends, and trainperf's fastest step.",
          (Part("llama", ("llama",),
                gpu={"--sdpa-backend": "CUDNN_ATTENTION,FLASH_ATTENTION,EFFICIENT_ATTENTION", "--fast": True,
                     "--warmup": "5", "--iters": "20"},
                cpu={"--sdpa-backend": "MATH,FLASH_ATTENTION", "--batch-seq": "1x32", "--fast": True,
                     **_TINY}),),
          llama_headline,
          "Seconds per training iteration (mean of 20 after 5 warm-up). The last column is the "
          "speed-up of trainperf's fastest step over the fastest stock row of that shape."),
    Suite("attention-targets",
          "Attention forward + backward, causal bf16, every implementation: the reference shape "
          "B1 H16 N16384 D64, head dim 128 at the same length, and B8 N2048 D64.",
          (Part("n16384", ("attention",),
                gpu={"--attention": "all", "--batch": "1", "--heads": "16", "--seq": "16384",
                     "--head-dim": "64,128", "--dtype": "bf16", "--mode": "forward-backward"},
                cpu={"--attention": "naive,sdpa-math,torch-fa2", "--batch": "1", "--heads": "2",
                     "--seq": "64", "--head-dim": "16", **_TINY}),
           Part("b8-n2048", ("attention",),
                gpu={"--attention": "all", "--batch": "8", "--heads": "16", "--seq": "2048",
                     "--head-dim": "64", "--dtype": "bf16", "--mode": "forward-backward"},
                cpu={"--attention": "naive,sdpa-math", "--batch": "2", "--heads": "2", "--seq": "32",
                     "--head-dim": "16", **_TINY})),
          attention_headline,
          "Milliseconds per forward + backward call (median of 20 after 5 warm-up), TFLOP/s in "
          "brackets; oom or unsupported where a case could not run."),
    Suite("attention-compiled",
          "Attention forward + backward under the CS336 FlashAttention leaderboard's protocol (the call "
          "compiled, o.sum().backward(), triton.testing.do_bench), causal bf16: the leaderboard's shape "
          "(q, k, v of 16 x 16384 x 64), the reference shape B1 H16 N16384 at head dims 64 and 128, and "
          "B8 N2048 D64.",
          tuple(Part(name, ("attention",),
                     gpu={"--attention": "triton-fa2,triton-fa2-atomic,sdpa-cudnn,cudnn-fe,fa4", "--batch": b,
                          "--heads": h, "--seq": n, "--head-dim": d, "--dtype": "bf16",
                          "--mode": "forward-backward", "--compile": "on"},
                     cpu={"--attention": "naive,sdpa-math", "--batch": "1", "--heads": "2", "--seq": "32",
                          "--head-dim": "16", "--compile": "on", **_TINY})
                for name, b, h, n, d in (("leaderboard", "16", "1", "16384", "64"),
                                         ("reference", "1", "16", "16384", "64,128"),
                                         ("b8-n2048", "8", "16", "2048", "64"))),
          attention_headline,
          "Milliseconds per compiled forward + backward call (median of do_bench's repetitions), "
          "TFLOP/s in brackets; then the call's summed GPU kernel time and the host's time to launch "
          "it. Where host ≥ kernels, do_bench times the launches and the kernel time compares the "
          "GPU work."),
    Suite("step-sizes",
          "The GPT-style LM's training step at sizes small to 2.7B, three context lengths, fp32 and "
          "bf16, eager and compiled.",
          (Part("step", ("step",),
                gpu={"--model": "small,medium,large,xl,2.7B", "--seq": "256,512,1024", "--batch": "4",
                     "--dtype": "fp32,bf16", "--compile": "off,on"},
                cpu={"--model": "tiny", "--seq": "32", "--batch": "2", "--dtype": "fp32", **_TINY}),),
          step_headline,
          "Median milliseconds per training step (10 after 5 warm-up), tokens per second and MFU "
          "against the GPU's dense peak for the dtype."),
    Suite("your-model",
          "The training step of models trainperf did not write, at real size: Qwen2.5-1.5B and Gemma 2 "
          "2B built from their published configs (random weights), eager and with each decoder layer "
          "compiled, and compiled with Liger Kernel's patch for their family, torchao's float8 on "
          "their Linears or trainperf's chunked LM-head loss where it computes the model's, their FLOPs "
          "counted with PyTorch's flop counter; and Qwen2.5-7B sharded with "
          "FSDP2 over every GPU of the machine (2 x 4096 tokens a GPU, each block compiled and "
          "checkpointed, keeping its attention's output or not; its loss from its logits or from its "
          "hidden states by trainperf's chunked loss).",
          (Part("step", ("step",),
                gpu={"--model": "hf:qwen2.5-1.5b,hf:gemma-2-2b", "--seq": "2048", "--batch": "4",
                     "--dtype": "bf16", "--compile": "off,on", "--warmup": "3", "--iters": "10"},
                cpu={"--model": "hf:tiny", "--seq": "32", "--batch": "2", "--dtype": "fp32", **_TINY}),
           Part("recipes", ("step",),
                gpu={"--model": "hf:qwen2.5-1.5b,hf:gemma-2-2b", "--seq": "2048", "--batch": "4",
                     "--dtype": "bf16", "--compile": "on", "--recipe": "liger,float8,trainperf",
                     "--warmup": "3", "--iters": "10"},
                cpu={"--model": "hf:tiny", "--seq": "32", "--batch": "2", "--dtype": "fp32",
                     "--recipe": "stock,liger,float8", **_TINY}),
           Part("shard", ("shard",),
                gpu={"--model": "hf:qwen2.5-7b", "--world-size": GPUS, "--seq": "4096",
                     "--batch-per-rank": "2", "--checkpoint": "full,full+attn", "--compile": "on",
                     "--loss": "torch,chunked", "--warmup": "2", "--iters": "5"},
                cpu={"--model": "hf:tiny", "--world-size": "2", "--seq": "16", "--batch-per-rank": "2",
                     "--checkpoint": "full", "--loss": "torch,chunked", "--peak-tflops": "1", **_TINY})),
          your_model_headline,
          "Median milliseconds per AdamW training step (10 after 3 warm-up) of 4 x 2048 tokens under bf16 "
          "autocast over fp32 weights, tokens per second, MFU from the FLOPs PyTorch's flop counter "
          "counted (causal attention counted whole) against the GPU's dense bf16 peak, peak memory, and "
          "the repeated blocks trainperf found and compiled; the sharded rows: the median of 5 steps "
          "after 2 (FSDP2 with bf16 compute and fp32 gradients, fused AdamW), peak memory per GPU.",
          multi_gpu=True),
    Suite("peers",
          "Llama-3.2-1B with what users pick instead of trainperf's step (torch.compile, Liger Kernel, "
          "Liger + compile, FlashAttention 4, Liger + FlashAttention 4) beside stock and trainperf's "
          "fastest step (FlashAttention 4 where it runs) at the six shapes of the seed grid, cuDNN "
          "attention where a recipe names none; each recipe's loss curve beside stock's from the same "
          "weights and batches, on four draws of the parity task; and the fastest step's speed-up, "
          "memory and energy against the best peer of each shape. The float8 steps are the `float8` suite's.",
          (Part("llama", ("llama",),
                gpu={"--recipe": "stock,compile,liger,liger-compile,fa4,liger-fa4,fast",
                     "--sdpa-backend": "CUDNN_ATTENTION", "--warmup": "3", "--iters": "30"},
                cpu={"--recipe": "stock,compile,fast", "--batch-seq": "1x32", "--sdpa-backend": "MATH",
                     **_TINY}),
           _parity_part("stock,compile,liger,liger-compile,fa4,liger-fa4,fast", "stock,fast", "--draws", 4)),
          peers_headline,
          "Seconds per iteration (mean of 30 after 3 warm-up), peak memory and, where it was read, the "
          "GPU's energy per iteration at each shape; the fastest step's speed-up ± its standard error "
          "(from the iterations' spread, taken as independent), and its memory and energy over the "
          "peer's; loss parity over 300 AdamW steps of the full-depth model (8 x 1024 tokens) on four "
          "draws: the largest deviation of the recipe's smoothed loss from stock's run of the same draw, "
          "and the verdict against stock's band (its runs from four seeds): within stock's noise, or "
          "outside it from a step on."),
    Suite("float8",
          "trainperf's fastest step with its own float8 on every decoder Linear (delayed scaling, "
          "casts in the kernels that produce each tensor) and on the LM head too (`fp8-trainperf-head`) "
          "beside the same step with torchao's float8 training of every decoder Linear (`fp8`), with "
          "trainperf's float8 on the MLP alone (`fp8-trainperf`) and beside the bf16 fastest step, on "
          "Llama-3.2-1B at the longest and a short shape; and the float8 steps' loss curves from the "
          "same weights and batches beside stock's. On layers of Llama-3.1-8B, whose heads of "
          "dimension 128 cuDNN's float8 attention takes on Hopper, the same float8 step with that "
          "attention (`fp8-trainperf-attn`) beside it on FlashAttention 4, timed and trained.",
          (Part("llama", ("llama",),
                gpu={"--recipe": "fast,fp8,fp8-trainperf,fp8-trainperf-all,fp8-trainperf-head",
                     "--batch-seq": "1x16384",
                     "--sdpa-backend": "CUDNN_ATTENTION", "--warmup": "3", "--iters": "30"},
                cpu={"--recipe": "stock,fp8-trainperf-all", "--batch-seq": "1x16", "--sdpa-backend": "MATH",
                     **_TINY}),
           Part("llama-more", ("llama",),
                gpu={"--recipe": "fast,fp8,fp8-trainperf-all,fp8-trainperf-head", "--batch-seq": "12x1024",
                     "--sdpa-backend": "CUDNN_ATTENTION", "--warmup": "3", "--iters": "30"},
                cpu={"--recipe": "fp8-trainperf-all", "--batch-seq": "1x16", "--sdpa-backend": "MATH",
                     **_TINY}),
           # the attention on cuDNN's float8 graphs too, on a Llama whose heads they take on Hopper
           # (dimension 128: Llama-3.1-8B's, four of its layers on one GPU), timed and trained
           Part("attention", ("llama",),
                gpu={"--model": "llama-3.1-8b", "--layers": "4", "--recipe": FLOAT8_ATTENTION_RECIPES,
                     "--batch-seq": "1x16384,4x4096", "--sdpa-backend": "CUDNN_ATTENTION", "--warmup": "3",
                     "--iters": "10"},
                cpu={"--recipe": "fp8-trainperf-all,fp8-trainperf-attn", "--batch-seq": "1x16",
                     "--sdpa-backend": "MATH", **_TINY}),
           Part("attention-parity", ("parity",),
                gpu={"--model": "llama-3.1-8b", "--layers": "2", "--recipe": FLOAT8_ATTENTION_RECIPES,
                     "--train-steps": "300", "--stock-seeds": "4", "--jobs": GPUS},
                cpu={"--recipe": FLOAT8_ATTENTION_RECIPES, "--train-steps": "4", "--seq": "16",
                     "--batch": "2", "--dtype": "fp32", "--stock-seeds": "2"}),
           # six seeds: one draw's band judges only where each seed stays within the others'
           # (parity_band.py); with four, seed 0 left the other three's band on an H200
           _parity_part("stock,fp8,fp8-trainperf-all,fp8-trainperf-head", "stock,fp8-trainperf-all",
                        "--repeats", 3, seeds=6)),
          float8_headline,
          "Seconds per iteration (mean of 30 after 3 warm-up on Llama-3.2-1B, of 10 on the 8B layers), "
          "peak memory and the GPU's energy per iteration at each shape; loss parity over three runs of "
          "one draw of the parity task (300 AdamW steps of the full-depth model, 8 x 1024 tokens), each "
          "run judged against stock's band (its runs from six seeds); the `parity` suite trains on two "
          "draws."),
    Suite("parity",
          "Every recipe's loss beside stock's band on two draws of the parity task (another Markov "
          "language and its batches each), the full-depth Llama-3.2-1B over 300 AdamW steps: each run "
          "judged against stock's own noise, its runs from four initialisations and batch orders "
          "(parity_band.csv).",
          (_parity_part("stock,compile,liger,liger-compile,fa4,liger-fa4,fast,fp8,fp8-trainperf",
                        "stock,fast", "--draws", 2),),
          draws_headline,
          "The largest deviation of each recipe's smoothed loss from stock's run of the same draw "
          "(8 x 1024 tokens), per draw; the verdicts against stock's band are in parity/parity_band.csv."),
    Suite("float8-causes",
          "torchao's float8 step (`fp8`) beside the same step with float8 on the MLP's products alone "
          "(`fp8-mlp`), on the attention projections' alone (`fp8-attention`) and scaled per row "
          "(`fp8-rowwise`): each run's loss judged against stock's band on the parity task's first "
          "draw, where `fp8` left it: which products, which scaling move its loss.",
          (_parity_part("stock,fp8,fp8-mlp,fp8-attention,fp8-rowwise", "stock,fast", "--draws", 1),),
          draws_headline,
          "The largest deviation of each recipe's smoothed loss from stock's run of the same draw "
          "(8 x 1024 tokens); the verdicts against stock's band are in parity/parity_band.csv."),
    Suite("peers-explain",
          "Where each recipe's gain over the stock Llama-3.2-1B step comes from: one profiled iteration "
          "of stock, the whole-model compile, Liger Kernel, FlashAttention 4, trainperf's fastest step "
          "and its float8 form at 1 x 16384 tokens, kernel time summed by kind of kernel.",
          tuple(Part(f"profile-{recipe}", ("profile", "llama"), stored=False, needs=needs,
                     gpu={"--recipe": recipe, "--batch-seq": "1x16384"}, cpu={"--recipe": recipe})
                for recipe, needs in (("stock", ""), ("compile", ""), ("liger", "liger_kernel"),
                                      ("fa4", "flash_attn"), ("fast", ""), ("fp8", "torchao"))),
          explain_headline,
          "Kernel milliseconds in one profiled iteration by kind of kernel (attention; matrix multiplies; "
          "Triton kernels: Inductor's fusions, Liger's and trainperf's; the rest: PyTorch's elementwise, "
          "reduction and copy kernels), then by phase of the step (the forward, backward and optimizer "
          "ranges), and in brackets the speed-up over stock's of that row. `trainperf profile-compare` "
          "on two recipes' profiles breaks an eager recipe down further, module by module.",
          plot=explain_plot),
    Suite("kernels",
          "Each fused kernel (RMSNorm, RoPE, SwiGLU, the LM-head loss) against its PyTorch reference, the "
          "compiled reference and the stock op, forward + backward at Llama-3.2-1B's width and 16k tokens.",
          (Part("kernels", ("kernels",),
                gpu={"--kernel": "all", "--tokens": "16384", "--d-model": "2048", "--vocab": "128256",
                     "--dtype": "bf16"},
                cpu={"--kernel": "norm-torch,norm-fused,norm-compiled,swiglu-torch,loss-torch,loss-chunked",
                     "--tokens": "64", "--d-model": "64", "--vocab": "128", **_TINY}),),
          kernels_headline,
          "Milliseconds per forward + backward call (median of 20 after 5 warm-up); in brackets the "
          "speed-up over the PyTorch reference (torch) of the same part."),
    Suite("cudnn",
          "NVIDIA's PyTorch-vs-cuDNN study of the Llama 3.1 8B forward pass (and the training iteration it "
          "did not time), profiled by module range; then the cuDNN-frontend RMSNorm and attention inside "
          "the Llama-3.2-1B step beside PyTorch's choices, and the attention op beside PyTorch's cuDNN SDPA.",
          (Part("study", ("cudnn-study",), gpu={}, cpu={"--phase": "forward,step"}, stored=False),
           Part("llama", ("llama",),
                gpu={"--norm": "torch,fused,triton,cudnn", "--sdpa-backend": "CUDNN_ATTENTION,CUDNN_FE",
                     "--batch-seq": "1x16384,12x1024", "--fast": True, "--warmup": "5", "--iters": "20"},
                cpu={"--norm": "torch,cudnn", "--sdpa-backend": "MATH,CUDNN_FE", "--batch-seq": "1x32",
                     **_TINY}),
           Part("fast", ("llama",),
                gpu={"--compile": "layers", "--loss": "chunked", "--sdpa-backend": "CUDNN_ATTENTION,CUDNN_FE",
                     "--batch-seq": "1x16384,12x1024", "--warmup": "5", "--iters": "20"},
                cpu={"--compile": "layers", "--loss": "chunked", "--sdpa-backend": "MATH,CUDNN_FE",
                     "--batch-seq": "1x32", **_TINY}),
           Part("attention", ("attention",),
                gpu={"--attention": "sdpa-cudnn,cudnn-fe,triton-fa2", "--batch": "1", "--heads": "16",
                     "--seq": "16384", "--head-dim": "64,128", "--dtype": "bf16",
                     "--mode": "forward-backward"},
                cpu={"--attention": "naive,cudnn-fe", "--batch": "1", "--heads": "2", "--seq": "64",
                     "--head-dim": "16", **_TINY})),
          cudnn_headline,
          "PyTorch's choice against cuDNN's. Study rows: kernel milliseconds (kernels) per range, summed "
          "over the 32 layers, one profiled iteration at 1 x 1024 tokens. Step rows: seconds per "
          "Llama-3.2-1B iteration (mean of 20 after 5 warm-up). Attention op: milliseconds per forward + "
          "backward call."),
    Suite("shard",
          "The full training step (forward, loss, backward, AdamW) of a model sharded over every GPU of "
          "the machine with FSDP2: the CS336 leaderboard's 8B model at 2 x 32,768 tokens, compiled, per "
          "checkpointing policy (every layer; every layer keeping its attention's output; all but 8 layers, "
          "keeping it) and attention kernel (cuDNN's through SDPA, FlashAttention 4), with torchao's float8 "
          "and trainperf's, launched eagerly and as CUDA graphs, and with 12 and 16 layers not checkpointed "
          "where memory allows, and with only the matrix products and attention kept (the float8 "
          "head's also with the allocator's segments growing in place), "
          "and with its attention on cuDNN's float8 graphs beside FlashAttention 4 "
          "(the whole step, and four of its layers on one GPU); the GPT LM's xl and "
          "2.7B (every layer checkpointed, each compiled) on one, two and all GPUs, sharded or replicated, "
          "at 8 x 1024 tokens in all (strong scaling) and 4 x 1024 a GPU (weak); and xl at 8 x 2048 tokens "
          "on two GPUs per FSDP2 knob that decides how much communication the step hides (layers a unit, "
          "keeping layers gathered for the backward), each layer compiled, beside the same step on one "
          "GPU, eager and compiled. FSDP2 runs one and four layers a unit; weak scaling also with the "
          "gradients reduced in bf16, and with each step's forward and backward replayed as a CUDA graph "
          "(with hybrid sharding too), as the xl step at 8 x 2048 is. On one GPU, the leaderboard's step "
          "cut to its first 12 layers (8 kept, 4 checkpointed): the calibration `trainperf predict` "
          "scales to the whole model and to many GPUs.",
          (Part("leaderboard", ("shard",),  # what keeping attention and 8 layers' activations buy
                gpu={**_LEADERBOARD, "--checkpoint": "full,full+attn,all-but-8+attn", "--compile": "on",
                     "--attention": "fa4"},
                cpu={"--model": "tiny", "--world-size": "2", "--checkpoint": "full+attn", "--loss": "chunked",
                     "--warmup": "1", "--iters": "2"}, min_gpus=2),
           Part("float8", ("shard",),  # the leaderboard's fastest kind of case: cuDNN's attention or
                # FlashAttention 4, its products in bf16, torchao's float8 or trainperf's
                gpu={**_LEADERBOARD, "--checkpoint": "all-but-8+attn", "--compile": "on",
                     "--attention": "sdpa-cudnn,fa4", "--float8": "off,torchao,trainperf"},
                cpu={"--model": "tiny", "--world-size": "2", "--float8": "off,torchao,trainperf", **_TINY},
                min_gpus=2),
           Part("frontier", ("shard",),  # fewer layers recomputed in the memory left, each float8 beside
                # bf16: how far the fastest kind of case goes before a rank runs out of memory
                gpu={**_LEADERBOARD, "--checkpoint": "all-but-8+attn,all-but-12+attn,all-but-16+attn,ops",
                     "--compile": "on", "--attention": "fa4",
                     "--float8": "off,torchao,trainperf,trainperf-head"},
                cpu={"--model": "tiny", "--world-size": "2", "--checkpoint": "all-but-1+attn", **_TINY},
                min_gpus=2),
           Part("frontier-allocator", ("shard",),  # the float8 head's frontier with the allocator's
                # segments growing in place, beside the frontier's fixed ones (near the memory's end
                # they free the cache and retry)
                gpu={**_LEADERBOARD, "--checkpoint": "all-but-8+attn,all-but-12+attn,all-but-16+attn,ops",
                     "--compile": "on", "--attention": "fa4", "--float8": "trainperf-head",
                     "--expandable-segments": "on"},
                cpu={"--model": "tiny", "--world-size": "2", "--checkpoint": "all-but-1+attn",
                     "--expandable-segments": "off", **_TINY},
                min_gpus=2),
           Part("float8-attention", ("shard",),  # the fastest float8 step with its attention on
                # cuDNN's float8 graphs beside FlashAttention 4's bf16
                gpu={**_LEADERBOARD, "--checkpoint": "all-but-8+attn", "--compile": "on",
                     "--attention": "fa4,cudnn-fp8", "--float8": "trainperf-head"},
                cpu={"--model": "tiny", "--world-size": "2", "--attention": "sdpa,cudnn-fp8", **_TINY},
                min_gpus=2),
           Part("float8-attention-layers", ("shard",),  # the same choice on one GPU: four of the
                # 8B's layers at its sequence, nothing recomputed
                gpu={**_LEADERBOARD, "--world-size": "1", "--batch": "1", "--layers": "4",
                     "--checkpoint": "none", "--compile": "on", "--attention": "fa4,cudnn-fp8",
                     "--float8": "trainperf-head"},
                cpu={"--model": "tiny", "--world-size": "1", "--attention": "sdpa,cudnn-fp8", **_TINY}),
           Part("leaderboard-graphed", ("shard",),  # the fastest FA4 steps, launched eagerly and
                # replayed as CUDA graphs (no host work left in the step)
                gpu={**_LEADERBOARD, "--checkpoint": "all-but-8+attn", "--compile": "on",
                     "--attention": "fa4", "--float8": "off,trainperf", "--cuda-graph": "off,on"},
                cpu={"--model": "tiny", "--world-size": "2", "--float8": "off,trainperf",
                     "--cuda-graph": "off,on", **_TINY}, min_gpus=2),
           Part("overlap", ("shard",),  # what hides FSDP2's collectives: fewer units, so the host runs ahead
                # and issues each gather early; keeping layers gathered for the backward (eager, the host
                # sets the pace: the docs have those rows)
                gpu={**_XL_LONG, "--world-size": "2", "--optimizer": "adamw-fused", "--compile": "on",
                     "--unit-layers": "1,2,4", "--reshard-after-forward": "on,off"},
                cpu={"--model": "tiny", "--world-size": "2", "--prefetch": "0,1",
                     "--reshard-after-forward": "on,off", "--warmup": "1", "--iters": "2"}, min_gpus=2),
           Part("graphed", ("shard",),  # the overlap part's best case with no host in the step: its
                # forward and backward replayed as one CUDA graph, beside DDP and one GPU the same way
                gpu={**_XL_LONG, "--world-size": "1,2", "--shard": "full,none", "--optimizer": "adamw-fused",
                     "--compile": "on", "--reshard-after-forward": "off", "--cuda-graph": "on"},
                cpu={"--model": "tiny", "--world-size": "2", "--cuda-graph": "off,on", **_TINY}),
           Part("one-gpu", ("shard",),  # the overlap part's step on one GPU, replicated and under FSDP2
                # (what `predict` calibrates each two-GPU choice by)
                gpu={**_XL_LONG, "--world-size": "1", "--shard": "full,none", "--optimizer": "adamw-fused",
                     "--compile": "off,on"},
                cpu={"--model": "tiny", "--world-size": "1", "--shard": "none", **_TINY}),
           Part("weak", ("shard",),
                gpu={"--model": "xl,2.7B", "--world-size": f"1,2,{GPUS}", "--shard": "full,none",
                     "--checkpoint": "full", "--seq": "1024", "--batch-per-rank": "4", "--compile": "on",
                     "--unit-layers": "1,4", "--optimizer": "adamw-fused", "--warmup": "2", "--iters": "5"},
                cpu={"--model": "tiny", "--world-size": "1,2", "--batch-per-rank": "2", **_TINY}),
           Part("weak-bf16", ("shard",),  # the weak part with half the gradient bytes on the wire
                gpu={"--model": "xl,2.7B", "--world-size": f"1,{GPUS}", "--shard": "full,none",
                     "--checkpoint": "full", "--seq": "1024", "--batch-per-rank": "4", "--compile": "on",
                     "--reduce-dtype": "bf16", "--optimizer": "adamw-fused", "--warmup": "2", "--iters": "5"},
                cpu={"--model": "tiny", "--world-size": "1,2", "--batch-per-rank": "2",
                     "--reduce-dtype": "bf16", **_TINY}),
           Part("weak-graphed", ("shard",),  # the weak part replayed as CUDA graphs, with hybrid sharding
                gpu={"--model": "xl,2.7B", "--world-size": f"1,{GPUS}", "--shard": "full,hybrid,none",
                     "--checkpoint": "full", "--seq": "1024", "--batch-per-rank": "4", "--compile": "on",
                     "--reshard-after-forward": "off", "--cuda-graph": "on", "--optimizer": "adamw-fused",
                     "--warmup": "2", "--iters": "5"},
                cpu={"--model": "tiny", "--world-size": "2", "--batch-per-rank": "2",
                     "--cuda-graph": "off,on", **_TINY}),
           Part("calibration", ("shard",),  # one GPU's share of the leaderboard's step, for predict
                gpu={**_LEADERBOARD, "--world-size": "1", "--batch": "1", "--layers": "12",
                     "--checkpoint": "all-but-8+attn", "--compile": "on", "--attention": "sdpa-cudnn,fa4",
                     "--float8": "off,torchao,trainperf,trainperf-head"},
                cpu={"--model": "tiny", "--world-size": "1", "--layers": "1", **_TINY}),
           Part("sizes", ("shard",),
                gpu={"--model": "xl,2.7B", "--world-size": f"1,2,{GPUS}", "--shard": "full,none",
                     "--checkpoint": "full", "--seq": "1024", "--batch": "8", "--compile": "on",
                     "--unit-layers": "1,4", "--optimizer": "adamw-fused", "--warmup": "2", "--iters": "5"},
                cpu={"--model": "tiny", "--world-size": "1,2", "--shard": "full,none", "--warmup": "1",
                     "--iters": "2"})),
          shard_headline,
          "Seconds per full training step (median over steps of the slowest rank), MFU against the GPUs' "
          "dense bf16 peak (recomputed FLOPs not counted), peak memory of the fullest rank.",
          multi_gpu=True),
    Suite("comm",
          "Collectives over every GPU of the machine (NCCL): bus bandwidth by message size.",
          (Part("comm", ("comm",),
                gpu={"--world-size": GPUS, "--bytes": "1M:4G", "--in-place": "off,on"},
                cpu={"--world-size": "2", "--bytes": "64K", **_TINY}, min_gpus=2),),
          comm_headline, "Bus bandwidth in GB/s (nccl-tests' definition and timing: back-to-back calls) by "
          "message size in MiB.",
          multi_gpu=True),
    Suite("ddp",
          "A data-parallel training step of the xl GPT LM (bf16 autocast) over two GPUs and over every GPU "
          "of the machine, per gradient-sync variant in three alternating rounds, eager at 4 x 512 tokens "
          "a rank (the host sets the pace) and with each decoder layer compiled at 8 x 1024 (far fewer "
          "launches from the host and four times the tokens, so the GPU sets the pace and the backward has "
          "work to hide communication behind), compiled also over host memory alone (`--link shm`, in two "
          "rounds, with the gradients in fp32 and, over every GPU, in bf16), over NCCL's sockets alone "
          "(bucketed against DDP), and for the 2.7B model at 4 x 1024, and with and without the sharded "
          "optimizer (ZeRO-1).",
          (Part("ddp", ("ddp",),
                gpu={"--world-size": f"2,{GPUS}", "--model": "xl", "--warmup": "2", "--iters": "10"},
                cpu={"--world-size": "2", "--variant": "flat,ddp", "--seq": "16", "--warmup": "1",
                     "--iters": "1"}, min_gpus=2),
           Part("zero1", ("ddp",),
                gpu={"--world-size": GPUS, "--model": "xl", "--variant": "naive,ddp",
                     "--shard-optimizer": "off,on", "--warmup": "2", "--iters": "10"},
                cpu={"--world-size": "2", "--variant": "naive", "--shard-optimizer": "off,on", "--seq": "16",
                     "--warmup": "1", "--iters": "1"}, min_gpus=2),
           Part("compiled", ("ddp",), gpu={**_DDP_COMPILED, "--warmup": "3", "--iters": "10"},
                cpu=_DDP_COMPILED_CPU, min_gpus=2),
           Part("shm", ("ddp",),  # over host memory the collectives take about as long as the step
                gpu={**_DDP_COMPILED, "--link": "shm", "--rounds": "2", "--warmup": "2", "--iters": "5"},
                cpu=_DDP_COMPILED_CPU, min_gpus=2),
           Part("shm-bf16", ("ddp",),  # the gradients in bf16: half as much for the backward to hide
                gpu={**_DDP_COMPILED, "--world-size": GPUS, "--link": "shm", "--reduce-dtype": "bf16",
                     "--rounds": "2", "--warmup": "2", "--iters": "5"},
                cpu={**_DDP_COMPILED_CPU, "--variant": "naive,bucketed", "--reduce-dtype": "bf16"},
                min_gpus=2),
           Part("socket", ("ddp",),  # NCCL's socket transport alone, as between hosts on Ethernet
                gpu={"--world-size": f"2,{GPUS}", "--model": "xl", "--link": "socket",
                     "--variant": "bucketed,ddp",
                     "--rounds": "1", "--warmup": "1", "--iters": "3"},
                cpu={"--world-size": "2", "--variant": "bucketed,ddp", "--seq": "16", "--warmup": "1",
                     "--iters": "1"}, min_gpus=2),
           Part("2.7B", ("ddp",),  # fp32 weights, gradients, AdamW state and DDP's buckets: 54 GB a rank
                gpu={**_DDP_COMPILED, "--model": "2.7B", "--batch": "4", "--warmup": "2", "--iters": "5"},
                cpu=_DDP_COMPILED_CPU, min_gpus=2)),
          ddp_headline, "Milliseconds per step of the slowest rank, the median over the rounds ± its 95% "
          "interval, and the lead over naive sync where that interval clears 1; the other columns are "
          "medians over the rounds: compute is the same step with no synchronisation; NCCL, exposed comm "
          "and hidden come from the kernel trace of one more step on "
          "every rank (exposed: NCCL time no computation overlaps, the most of any rank; least exposed: the "
          "least, the rank the step waited for).", multi_gpu=True),
)}
