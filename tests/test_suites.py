"""Suites: every suite definition runs in its tiny CPU form (so none can rot), its folder holds
what the results page needs, and the page generator renders folders into markdown."""

import json
import multiprocessing
import shutil
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.core.store import Store
from trainperf.suites.catalog import SUITES
from trainperf.suites.page import MARKER, latest_folders, newest_parts, results_page, suite_report
from trainperf.suites.runner import gpu_slug

runner = CliRunner()


def _run_suite(name: str, root: str) -> SimpleNamespace:
    res = runner.invoke(app, ["suite", "run", name, "--results", f"{root}/results", "--db", f"{root}/r.db",
                              "--quiet"])
    return SimpleNamespace(exit_code=res.exit_code, output=res.output)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Every suite run once on the CPU into one results folder and one store, two at a time in two
    worker processes: a tiny suite keeps about one core busy (150 against 211 s on two cores)."""
    root = tmp_path_factory.mktemp("suites")
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        # the multi-rank suites, the longest, are last in SUITES: first here, so no worker ends
        # with one of them while the other has finished
        runs = {name: pool.submit(_run_suite, name, str(root)) for name in reversed(SUITES)}
        outputs = {name: run.result() for name, run in runs.items()}
    return root, outputs


@pytest.mark.parametrize("name", list(SUITES))
def test_every_suite_runs_in_its_tiny_form(ran, name):
    root, outputs = ran
    assert outputs[name].exit_code == 0, outputs[name].output
    (folder,) = (root / "results" / name).iterdir()
    assert folder.name.startswith("cpu-")
    meta = json.loads((folder / "suite.json").read_text())
    assert meta["command"] == f"trainperf suite run {name}" and meta["parts"]
    assert json.loads((folder / "env.json").read_text())["device"] == "cpu"
    for part in meta["parts"]:
        if "left_out" in part:  # only for an optional package the CPU run has not got, and said so
            assert part["left_out"].startswith("needs the ") and part["left_out"].endswith(" package"), part
            continue
        csvs = list((folder / part["name"]).glob("*.csv"))
        assert csvs and all(len(pd.read_csv(c)) > 0 for c in csvs), part
        table = pd.read_csv(csvs[0])
        if "status" not in table:  # a profile's tables (ranges, kernels) hold no records
            continue
        assert "ok" in set(table.status), part
        # on the CPU only an optional extra's cases may be left unsupported (the cuDNN frontend's, or
        # one naming its install command or the GPU it needs, or a CUDA graph's), and say why
        left = table[table.status != "ok"]
        assert (left.status == "unsupported").all(), part
        why = left.reason.astype(str)
        assert (why.str.contains("cudnn") | why.str.contains("pip install 'trainperf[", regex=False)
                | why.str.contains("float8 tensor cores") | why.str.contains("CUDA GPUs")).all(), part
    report = (folder / "report.md").read_text()
    assert "| " in report and f"trainperf suite run {name}" in report  # a headline table


def test_a_second_run_resumes_from_the_store(ran):
    root, _ = ran
    stored = len(Store(root / "r.db").records())
    res = runner.invoke(app, ["suite", "run", "step-sizes", "--results", str(root / "results"),
                              "--db", str(root / "r.db"), "--quiet"])
    assert res.exit_code == 0
    assert len(Store(root / "r.db").records()) == stored  # nothing measured twice


def test_a_run_of_some_parts_leaves_the_others_to_the_older_run_on_the_results_page(ran, tmp_path):
    root, _ = ran
    results = tmp_path / "results"
    source = next((root / "results" / "attention-targets").iterdir())
    older, newer = (results / "attention-targets" / name for name in ("h100-2026-01-01", "h100-2026-02-01"))
    for folder in (older, newer):
        shutil.copytree(source, folder)
        env = json.loads((folder / "env.json").read_text())
        (folder / "env.json").write_text(json.dumps({**env, "gpu_name": "NVIDIA H100 80GB HBM3"}))
    shutil.rmtree(newer / "b8-n2048")  # the newer run measured the other part alone
    assert newest_parts(results) == {older: {"b8-n2048"}, newer: {"n16384"}}
    text = results_page(results, tmp_path / "README.md")
    sections = text.split("\n## ")[1:]
    assert [s.splitlines()[0].rsplit(" (", 1)[1] for s in sections] == ["b8-n2048)", "n16384)"]
    short, long = "| B2 H2 N32 D16 |", "| B1 H2 N64 D16 |"  # the two parts' shapes in their tiny form
    assert short in sections[0] and long not in sections[0]  # each section its own part's rows
    assert long in sections[1] and short not in sections[1]
    assert "h100-2026-01-01/report.md" in sections[0] and "h100-2026-02-01/report.md" in sections[1]


def test_the_results_page_renders_the_latest_gpu_folder_of_each_suite(ran, tmp_path):
    root, _ = ran
    results = tmp_path / "results"
    source = next((root / "results" / "attention-targets").iterdir())
    for name in ("h100-2026-01-01", "h100-2026-02-01", "h100-2026-02-01b"):  # b: a later run that day
        folder = results / "attention-targets" / name
        shutil.copytree(source, folder)
        env = json.loads((folder / "env.json").read_text())
        (folder / "env.json").write_text(json.dumps({**env, "gpu_name": "NVIDIA H100 80GB HBM3"}))
    shutil.copytree(source, results / "attention-targets" / "cpu-2026-03-01")
    assert [f.name for f in latest_folders(results)] == ["cpu-2026-03-01", "h100-2026-02-01b"]
    page = tmp_path / "README.md"
    page.write_text("# My intro\n\nkept as written\n" + MARKER + "\nold generated text\n")
    text = results_page(results, page)
    assert text.startswith("# My intro\n\nkept as written\n") and "old generated text" not in text
    assert "## attention-targets on NVIDIA H100 80GB HBM3" in text
    assert "[report](results/attention-targets/h100-2026-02-01b/report.md)" in text  # its page
    assert "h100-2026-01-01" not in text and "h100-2026-02-01)" not in text and "cpu-2026-03-01" not in text
    assert "| naive |" in text and "Not yet run on a GPU: `seed-llama`" in text


def test_the_report_command_writes_the_page_and_each_report(ran, tmp_path):
    root, _ = ran
    page = tmp_path / "page.md"
    res = runner.invoke(app, ["report", "--results", str(root / "results"), "--file", str(page)])
    assert res.exit_code == 0, res.output
    assert MARKER in page.read_text()


@pytest.mark.parametrize("name, slug", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                        ("NVIDIA GeForce RTX 4090", "4090"), (None, "cpu")])
def test_gpu_slug(name, slug):
    assert gpu_slug(name) == slug


def test_an_unknown_suite_is_one_line_naming_the_suites(tmp_path):
    res = runner.invoke(app, ["suite", "run", "fastest", "--results", str(tmp_path)])
    assert res.exit_code == 2 and "valid choices: seed-llama" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_suite_list_names_every_suite_and_its_commands():
    res = runner.invoke(app, ["suite", "list"])
    assert res.exit_code == 0
    for suite in SUITES.values():
        assert suite.name in res.output
        assert all(f"trainperf {' '.join(p.command)}" in res.output for p in suite.parts)


def test_ctrl_c_inside_a_part_stops_the_suite_with_exit_130_and_a_report_of_what_finished(tmp_path,
                                                                                          monkeypatch):
    calls = []

    def invoke(argv):  # the first part finishes, Ctrl-C comes in the second
        calls.append(argv)
        return 0 if len(calls) == 1 else 130

    monkeypatch.setattr("trainperf.cli.suites.invoke", invoke)
    res = runner.invoke(app, ["suite", "run", "shard", "--results", str(tmp_path / "r"),
                              "--db", str(tmp_path / "r.db")])
    assert res.exit_code == 130 and "run the same command again to resume" in res.output
    first, second, *later = [p.name for p in SUITES["shard"].parts]
    assert f"suite shard stopped in part {second}" in res.output
    [meta_path] = (tmp_path / "r").glob("shard/*/suite.json")
    parts = {p["name"]: p for p in json.loads(meta_path.read_text())["parts"]}
    assert "left_out" not in parts[first] and "interrupted" in parts[second]
    assert all(parts[name]["left_out"] == "not reached: the suite was interrupted" for name in later)
    report_md = (meta_path.parent / "report.md").read_text()
    assert f"- Interrupted: {second} (stopped by Ctrl-C: the cases it finished)." in report_md


def test_without_db_every_part_stores_into_the_results_folder_s_own_store(tmp_path, monkeypatch):
    """A committed results folder carries its store: the same command on another machine resumes
    from it without being told where it is."""
    seen = []
    monkeypatch.setattr("trainperf.cli.suites.invoke", lambda argv: seen.append(argv) or 0)
    res = runner.invoke(app, ["suite", "run", "cudnn", "--part", "fast,attention", "--results",
                              str(tmp_path / "r"), "--quiet"])
    assert res.exit_code == 0, res.output
    (folder,) = (tmp_path / "r" / "cudnn").iterdir()
    assert [argv[argv.index("--db") + 1] for argv in seen] == [str(folder / "cudnn.db")] * 2


def test_a_part_that_fails_stops_the_suite_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr("trainperf.cli.suites.invoke", lambda argv: 1)
    res = runner.invoke(app, ["suite", "run", "step-sizes", "--results", str(tmp_path / "r"),
                              "--db", str(tmp_path / "r.db")])
    assert res.exit_code == 2 and "suite step-sizes, part step" in res.output and "exit code 1" in res.output


def test_the_attention_headline_shows_kernel_and_host_time_where_they_were_measured(tmp_path):
    from trainperf.suites.catalog import attention_headline
    rows = [dict(attention="fa4", batch=8, heads=16, seq=2048, head_dim=64, status="ok", time_ms_median=0.909,
                 tflops=264.0, kernel_ms=0.76, host_ms=1.545),
            dict(attention="naive", batch=8, heads=16, seq=2048, head_dim=64, status="ok", time_ms_median=3.0,
                 tflops=80.0),
            dict(attention="cudnn-fe", batch=8, heads=16, seq=2048, head_dim=64, status="unsupported")]
    (tmp_path / "p").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "p" / "attention.csv", index=False)
    table = attention_headline({"p": tmp_path / "p"}).set_index("attention")
    cells = table.iloc[:, 0]
    assert cells["fa4"] == "0.909 (264); kernels 0.76, host 1.54"
    assert cells["naive"] == "3 (80)"
    assert cells["cudnn-fe"].startswith("unsupported")


def test_the_shard_headline_names_the_fsdp2_unit_where_cases_differ_in_it(tmp_path):
    from trainperf.suites.catalog import shard_headline
    base = dict(model="xl", world_size=2, shard="full", checkpoint="full", loss="torch", compile=True,
                optimizer="adamw-fused", prefetch=0, reshard_after_forward=False, attention="sdpa",
                float8="off", batch=8, seq=2048, status="ok", mfu=0.5, mfu_at_clock=0.661)
    (tmp_path / "p").mkdir()
    pd.DataFrame([dict(base, unit_layers=k, step_ms_median=ms) for k, ms in ((1, 324.3), (4, 335.8))]).to_csv(
        tmp_path / "p" / "shard.csv", index=False)
    table = shard_headline({"p": tmp_path / "p"})
    assert table.unit_layers.tolist() == [1, 4] and table["step s"].tolist() == ["0.324", "0.336"]
    assert "attention" not in table  # one attention kernel: no column for it
    assert table["MFU at clock"].tolist() == ["0.661"] * 2 and "HFU" not in table  # none recorded
    (tmp_path / "q").mkdir()  # a part measured with bf16 gradients beside one from before the setting
    pd.DataFrame([dict(base, unit_layers=1, reduce_dtype="bf16", step_ms_median=300.0)]).to_csv(
        tmp_path / "q" / "shard.csv", index=False)
    both = shard_headline({"p": tmp_path / "p", "q": tmp_path / "q"})
    assert both.reduce_dtype.tolist() == ["fp32", "fp32", "bf16"]


def test_a_section_shows_each_part_s_first_plot_before_any_part_s_second(tmp_path):
    from trainperf.suites.page import shown_plots
    for part, plots in {"llama": ["iteration_time", "speedup"], "llama-more": ["iteration_time", "speedup"],
                        "parity": ["parity_losses"]}.items():
        (tmp_path / part).mkdir()
        for name in plots:
            (tmp_path / part / f"{name}.png").write_bytes(b"")
    shown = [p.relative_to(tmp_path).as_posix() for p in shown_plots(tmp_path)]
    assert shown == ["llama/iteration_time.png", "llama-more/iteration_time.png", "parity/parity_losses.png",
                     "llama/speedup.png"]


def test_the_machine_line_names_each_part_s_gpus_only_where_a_suite_ran_on_several(tmp_path):
    from trainperf.suites.page import machine_line

    env = {"gpu_name": "NVIDIA H100 80GB HBM3", "torch": "2.11"}
    for part, uuids in {"llama": ["26662266-04c5", "26662266-04c5"], "parity": ["26662266-04c5"],
                        "profile": []}.items():
        (tmp_path / part).mkdir()
        pd.DataFrame({"status": ["ok"] * len(uuids), "env_gpu_uuid": uuids}).to_csv(
            tmp_path / part / "records.csv", index=False)
    assert "GPUs" not in machine_line(env, tmp_path)  # one GPU: nothing to say
    pd.DataFrame({"gpu_uuid": ["GPU-13268013-9009", None]}).to_csv(tmp_path / "parity" / "timing.csv",
                                                                    index=False)
    assert machine_line(env, tmp_path).endswith(
        "; records from several GPUs: llama on 26662266, parity on 13268013 and 26662266")


def test_the_machine_line_says_what_held_the_clock(tmp_path):
    """The power cap's share of the samples over the cases, and the cases heat or the hardware held."""
    from trainperf.suites.page import machine_line

    env = {"gpu_name": "NVIDIA H100 80GB HBM3", "torch": "2.11"}
    (tmp_path / "llama").mkdir()
    table = pd.DataFrame({"sm_clock_mhz": [1500.0, 1700.0], "power_w": [690.0, 700.0],
                          "power_capped": [1.0, 0.5]})
    table.to_csv(tmp_path / "llama" / "llama.csv", index=False)
    line = machine_line(env, tmp_path)
    assert line.endswith("observed 1600 MHz SM clock, 695 W (medians while timing); "
                         "the power cap held the clock in 75% of the samples (mean over the cases)")
    table.assign(clock_throttled=[None, "software thermal 20%"]).to_csv(tmp_path / "llama" / "llama.csv",
                                                                        index=False)
    assert machine_line(env, tmp_path).endswith("; heat or the hardware held it in 1 case (their notes)")


def test_part_runs_only_the_parts_it_names_and_says_so(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr("trainperf.cli.suites.invoke", lambda argv: ran.append(argv[0]) or 0)
    res = runner.invoke(app, ["suite", "run", "cudnn", "--part", "fast,attention", "--results",
                              str(tmp_path / "r"), "--db", str(tmp_path / "r.db"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert ran == ["llama", "attention"]
    (meta,) = (tmp_path / "r").glob("cudnn/*/suite.json")
    parts = json.loads(meta.read_text())
    assert parts["command"] == "trainperf suite run cudnn --part fast,attention"
    assert [p["name"] for p in parts["parts"] if "left_out" in p] == ["study", "llama"]
    report = (meta.parent / "report.md").read_text()  # one line for the parts --part left out
    assert "- Left out: study, llama (not asked for (--part)).\n" in report and report.count("Left out") == 1
    (meta.parent / "study").mkdir()  # a part another call ran into the folder is not left out
    (meta.parent / "study" / "study.csv").write_text("x\n1\n")
    report = suite_report(meta.parent)
    assert "- Left out: llama (not asked for (--part)).\n" in report
    assert "- From other calls than this one (README.md says which): study.\n" in report


def test_an_unknown_part_is_one_line_naming_the_suite_s_parts(tmp_path):
    res = runner.invoke(app, ["suite", "run", "shard", "--part", "sizes,nope", "--results", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "error: --part of suite shard: unknown value 'nope'; valid choices: leaderboard, float8, "
        "frontier, frontier-allocator, float8-attention, float8-attention-layers, leaderboard-graphed, "
        "overlap, graphed, one-gpu, weak, weak-bf16, weak-graphed, calibration, sizes"]


def test_a_folder_keeps_the_caption_its_suite_had_when_it_ran(ran, tmp_path):
    """A suite's caption changes with its definition; an older folder is described as it ran."""
    root, _ = ran
    (folder,) = (root / "results" / "step-sizes").iterdir()
    copy = tmp_path / "step-sizes" / folder.name
    shutil.copytree(folder, copy)
    meta = json.loads((copy / "suite.json").read_text())
    assert meta["caption"] == SUITES["step-sizes"].caption  # kept at run time
    meta["caption"] = "Milliseconds as the suite then measured them."
    (copy / "suite.json").write_text(json.dumps(meta))
    section = suite_report(copy)
    assert "Milliseconds as the suite then measured them." in section
    assert SUITES["step-sizes"].caption not in section


def test_the_ddp_headline_is_one_row_per_setup_with_its_rounds_interval_and_lead(tmp_path):
    from trainperf.suites.catalog import ddp_headline

    def record(variant, rnd, step, status="ok", zero=False):
        return {"variant": variant, "bucket_mb": 25.0 if variant == "ddp" else None, "shard_optimizer": zero,
                "link": "auto", "compile": False, "reduce_dtype": "fp32", "model": "xl", "batch": 4,
                "seq": 512, "world_size": 2,
                "round": rnd, "status": status,
                "step_ms_median": step, "compute_ms": step and step - 50, "nccl_ms": 40.0,
                "exposed_comm_ms": 30.0, "exposed_comm_least_ms": 20.0, "hidden_share": 0.25,
                "opt_state_mb": 100.0}

    from trainperf.core.record import Record
    from trainperf.workloads.ddp_rounds import SETUP, rounds_table

    folders = {}
    for part, rows in {"ddp": [record("naive", r, s) for r, s in ((1, 300), (2, 310), (3, 320))]
                       + [record("ddp", r, s) for r, s in ((1, 200), (2, 205), (3, 212))]
                       + [record("fsdp2", 1, None, "oom")],
                       "zero1": [record("naive", r, s) for r, s in ((1, 300), (2, 310), (3, 320))]}.items():
        folders[part] = tmp_path / part
        folders[part].mkdir()
        pd.DataFrame(rows).to_csv(folders[part] / "ddp.csv", index=False)
        recs = [Record("ddp", {k: row[k] for k in (*SETUP, "round")}, row["status"],
                       metrics={"step_ms_median": row["step_ms_median"], "hidden_share": 0.25})
                for row in rows]
        rounds_table(recs).to_csv(folders[part] / "ddp_rounds.csv", index=False)
    table = ddp_headline(folders).set_index("variant")
    assert list(table.index) == ["naive", "ddp", "fsdp2"]  # naive, in both parts, is one row
    assert table.loc["naive", "step ms"] == "310 ± 25" and table.loc["naive", "rounds"] == 3
    assert table.loc["naive", "batch x seq"] == "4x512"  # the tokens a rank each setup ran
    lead = table.loc["ddp", "lead over naive"]
    assert lead.startswith("1.5") and "faster" in lead
    assert table.loc["fsdp2", "step ms"] == "oom" and table.loc["fsdp2", "compute ms"] == "oom"


def test_a_folder_beside_the_parts_of_a_results_folder_is_not_a_part(tmp_path):
    import json

    from trainperf.suites.page import part_dirs, shown_plots

    for name in ("ddp", "zero1", "socket"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ddp_steps.png").write_bytes(b"")
    (tmp_path / "suite.json").write_text(json.dumps({"parts": [{"name": "zero1"}, {"name": "ddp"}]}))
    assert part_dirs(tmp_path) == [tmp_path / "zero1", tmp_path / "ddp"]
    assert "socket" not in {p.parent.name for p in shown_plots(tmp_path)}


def test_a_long_headline_table_is_cut_on_the_page_and_whole_in_its_report(ran, tmp_path, monkeypatch):
    from trainperf.suites import page as page_module

    root, _ = ran
    results = tmp_path / "results"
    folder = results / "attention-targets" / "h100-2026-01-01"
    shutil.copytree(next((root / "results" / "attention-targets").iterdir()), folder)
    env = json.loads((folder / "env.json").read_text())
    (folder / "env.json").write_text(json.dumps({**env, "gpu_name": "NVIDIA H100 80GB HBM3"}))
    rows = len(page_module.headline(folder, json.loads((folder / "suite.json").read_text())))
    assert rows > 2
    monkeypatch.setattr(page_module, "PAGE_ROWS", 2)
    text = results_page(results, tmp_path / "README.md")
    assert f"_{rows - 2} more rows in the report._" in text
    report = page_module.suite_report(folder)
    assert "more rows" not in report and report.count("\n| ") >= rows + 1
