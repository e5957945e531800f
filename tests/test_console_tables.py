"""The console table rule: every table fits the terminal, one line per row, notes as footnotes."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.table import Table

from trainperf.cli.distributed import DDP_COLUMNS, SHARD_COLUMNS
from trainperf.cli.workloads import LLAMA_COLUMNS, STEP_COLUMNS
from trainperf.core import report
from trainperf.core.record import Record

SHARD_SPEC = dict(model="cs336-8b", world_size=2, shard="full", checkpoint="all-but-8+attn",
                  reshard_after_forward=True, prefetch=1, unit_layers=1, batch=2, seq=32768, dtype="bf16",
                  reduce_dtype="fp32", optimizer="adamw-fused", loss="chunked", compile=True,
                  cuda_graph=False)
SHARD_METRICS = dict(step_ms_median=3764.2, step_ms_std=11.3, forward_ms=901.0, backward_ms=2650.0,
                     optimizer_ms=40.1, exposed_comm_ms=120.5, exposed_comm_least_ms=80.1,
                     exposed_comm_host_ms=2.0, tokens_per_s=17410.0, mfu=0.637, recompute_tflop=412.0,
                     peak_mem_gb=121.4)
KILLED = "rank 1: the process was killed by SIGKILL (signal 9) while the case ran; detected after 0.4 s"


def shard_rows() -> list[Record]:
    return [Record("shard", {**SHARD_SPEC, "float8": f8}, "ok", dict(SHARD_METRICS))
            for f8 in ("off", "trainperf", "torchao")] + [
        Record("shard", {**SHARD_SPEC, "float8": "torchao", "seq": 65536}, "error", reason=KILLED)]


def ddp_rows() -> list[Record]:
    spec = dict(model="xl", world_size=2, link="nvlink", compile=True, round=0, bucket_mb=25.0,
                shard_optimizer=False, reduce_dtype="fp32")
    metrics = dict(step_ms_median=410.2, step_ms_std=0.2, tokens_per_s=81000.0, exposed_comm_ms=130.0,
                   hidden_share=0.59, peak_mem_gb=40.2, compute_ms=240.0, nccl_ms=300.0,
                   comm_alone_ms=280.0, opt_state_mb=1234.0)
    return [Record("ddp", {**spec, "variant": v}, "ok", dict(metrics)) for v in ("bucketed", "ddp")] + [
        Record("ddp", {**spec, "variant": "overlap"}, "error", reason=KILLED)]


def llama_rows() -> list[Record]:
    spec = dict(sdpa_backend="FA4", batch=1, seq=16384, compile="layers", recipe="fp8-trainperf-all")
    metrics = dict(iter_s_mean=0.2761, iter_s_median=0.2758, iter_s_std=0.0011, tokens_per_s=59400.0,
                   tflops=612.0, peak_mem_gb=61.2, swaps="norm=triton,rope=triton,loss=chunked",
                   notes="noisy: CV 6.1% over 100 iterations")
    return [Record("llama", {**spec, "batch": b, "seq": 16384 // b}, "ok", dict(metrics)) for b in (1, 2)]


def render(records: list[Record], columns, width: int) -> tuple[list[str], Table]:
    group = report.rich_table(records, columns, title="t", width=width)
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(group)
    table = next(r for r in group.renderables if isinstance(r, Table))
    return console.export_text().splitlines(), table


CASES = {"shard": (shard_rows, SHARD_COLUMNS), "ddp": (ddp_rows, DDP_COLUMNS),
         "llama": (llama_rows, LLAMA_COLUMNS)}
# the answer each command is run for: on screen at 100 columns
HEADLINE = {"shard": {"step ms", "MFU", "exposed comm ms", "peak GB"},
            "ddp": {"step ms", "exposed comm ms", "peak GB"}, "llama": {"s/iter", "tok/s", "peak GB"}}


@pytest.mark.parametrize("width", [100, 160])
@pytest.mark.parametrize("name", list(CASES))
def test_the_default_table_fits_the_terminal_one_line_per_row(name, width):
    rows, columns = CASES[name]
    records = rows()
    lines, table = render(records, columns, width)
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    body = [line for line in lines if line.startswith("│")]
    assert len(body) == len(records), "a cell wrapped:\n" + "\n".join(lines)
    assert sum(line.startswith("┃") for line in lines) == 1, "a header wrapped"
    headers = [c.header for c in table.columns]
    assert HEADLINE[name] | {"status"} <= set(headers)
    assert not any("…" in line for line in body), "a cell was cut short"


def test_headline_metrics_and_the_differing_case_columns_show_the_rest_is_named_once():
    lines, table = render(shard_rows(), SHARD_COLUMNS, 160)
    headers = [c.header for c in table.columns]
    assert headers[:3] == ["batch x seq", "float8", "step ms"]  # only these differ between the rows
    assert {"MFU", "exposed comm ms", "peak GB", "tok/s", "status", "note"} <= set(headers)
    assert "fwd ms" not in headers  # a detail: --wide
    text = "\n".join(lines)
    assert "every case: model cs336-8b, n 2, shard full, ckpt all-but-8+attn" in text
    assert "3,764 ± 11" in text
    assert f"[1] {KILLED}" in text  # the reason whole, as a footnote
    assert "not shown: fwd ms, bwd ms" in text


def test_identical_notes_share_one_footnote():
    lines, _ = render(llama_rows(), LLAMA_COLUMNS, 100)
    assert sum("noisy: CV 6.1%" in line for line in lines) == 1
    assert sum(line.startswith("│") and line.rstrip("│ ").endswith("[1]") for line in lines) == 2


def test_a_narrow_terminal_drops_headline_columns_from_the_right_and_keeps_the_status():
    lines, table = render(shard_rows(), SHARD_COLUMNS, 70)
    headers = [c.header for c in table.columns]
    assert headers[:3] == ["batch x seq", "float8", "step ms"] and "status" in headers
    assert "tok/s" not in headers and "tok/s" in "\n".join(lines)  # named as not shown
    assert all(len(line) <= 70 for line in lines)


@pytest.mark.parametrize("name", list(CASES) + ["step"])
def test_wide_shows_every_column(name, monkeypatch):
    monkeypatch.setattr(report.TABLES, "wide", True)
    rows, columns = CASES.get(name, (shard_rows, STEP_COLUMNS))
    _, table = render(rows(), columns, 100)
    expected = [c.header for c in map(lambda c: report.Column(*c), columns) if c.role != "notes"]
    assert [c.header for c in table.columns][:len(expected)] == expected


def test_the_contributions_table_names_its_shape_once_and_keeps_its_answer_at_100_columns():
    import pandas as pd

    from trainperf.cli.common import frame_table
    from trainperf.workloads.contributions import CONTRIBUTION_CASE, contributions

    frame = pd.DataFrame([{**SHARD_SPEC, "checkpoint": ckpt, "attention": att, "status": "ok",
                           "step_ms_median": ms}
                          for ckpt, att, ms in (("all-but-8+attn", "fa4", 3764.2),
                                                ("full", "fa4", 4102.0), ("all-but-8+attn", "sdpa", 3990.5))])
    console = Console(width=100, file=io.StringIO(), record=True)
    console.print(frame_table(contributions(frame), title="t", case=CONTRIBUTION_CASE))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 100 for line in lines), "\n".join(lines)
    header = next(line for line in lines if line.startswith("┃"))
    assert "model" not in header and "setting" in header and "slower_by" in header, header
    shared = "every case: model cs336-8b, world_size 2, batch 2, seq 32768"
    assert any(line.startswith(shared) for line in lines)
    assert sum(line.startswith("│") for line in lines) == 2


def test_the_parity_band_table_keeps_each_run_s_verdict_at_100_columns_and_says_why_undecided():
    import pandas as pd

    from trainperf.cli.common import frame_table
    from trainperf.workloads.parity_band import verdicts_first

    undecided = "undecided: stock's band decides nothing (seed 1 outside the others from step 46)"
    judged = pd.DataFrame([{"recipe": r, "run": d, "draw": d, "seeds": 4, "band_dev_max": 1.89 + d,
                            "band_dev_final": -0.225, "final_diff": -0.00118, "final_ci": 0.0207,
                            "left_at": 40.0 if r == "fp8" else float("nan"),
                            "verdict": undecided if d == 2 else "outside it from step 40" if r == "fp8"
                            else "within stock's noise"}
                           for d in (1, 2) for r in ("liger-compile", "fp8")])
    console = Console(width=100, file=io.StringIO(), record=True)
    console.print(frame_table(verdicts_first(judged), case=("recipe", "run", "draw"), notes=("why",)))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 100 for line in lines), "\n".join(lines)
    header = next(line for line in lines if line.startswith("┃"))
    assert "verdict" in header and "why" not in header, header
    rows = [line for line in lines if line.startswith("│")]
    assert [row.split("│")[4].strip() for row in rows] == [
        "within stock's noise", "outside it from step 40", "undecided", "undecided"], rows
    assert [row.split("│")[-2].strip() for row in rows] == ["", "", "[1]", "[1]"], rows
    assert "[1] stock's band decides nothing (seed 1 outside the others from step 46)" in lines


def test_a_step_recipe_row_names_what_its_recipe_swapped_in():
    spec = dict(model="hf:qwen2.5-1.5b", seq=2048, batch=4, dtype="bf16", compile=True, mode="train")
    rows = [Record("step", {**spec, "recipe": recipe}, "ok", {"step_ms_median": ms, "swaps": swaps})
            for recipe, swaps, ms in (("liger", "liger,loss=liger-flce", 213.4),
                                      ("float8", "float8=torchao", 169.6))]
    rows.append(Record("step", {**spec, "recipe": "stock", "loss": "chunked"}, "ok",
                       {"step_ms_median": 180.0}))
    lines, table = render(rows, STEP_COLUMNS, 160)
    body = [line for line in lines if line.startswith("│")]
    assert [c.header for c in table.columns][:2] == ["recipe", "swaps"], lines
    assert [row.split("│")[2].strip() for row in body] == ["liger,loss=liger-flce", "float8=torchao",
                                                              "loss=chunked"], lines
