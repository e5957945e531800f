import pandas as pd
import pytest
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.profiling.compare import (
    context_warnings,
    label_sets,
    load_result_set,
    pairing_warnings,
    side_by_side,
)
from trainperf.workloads.llama_sdpa import CSV_COLUMNS

runner = CliRunner()


def fixture_csv(path, gpu, scale, torch_version="2.11.0", clock=1980):
    rows = []
    for backend in ("CUDNN_ATTENTION", "FLASH_ATTENTION"):
        for b, n, t in ((1, 16384, 0.45), (12, 1024, 0.25)):
            rows.append({"backend": backend, "batch_size": b, "seq_len": n, "mean_s": t * scale,
                         "median_s": t * scale, "std_s": 0.001, "tokens_per_s": b * n / (t * scale),
                         "tflops": 1.0, "peak_mem_gb": 10.0, "status": "ok", "speedup": 1.0,
                         "kv_heads": "native", "reason": None, "gpu": gpu, "torch": torch_version,
                         "cuda": "13.0", "cudnn": 91000, "sm_clock_mhz": clock, "dtype": "bf16",
                         "compile": False})
    pd.DataFrame(rows, columns=CSV_COLUMNS).to_csv(path, index=False)
    return path


def test_side_by_side_speedup(tmp_path):
    a = fixture_csv(tmp_path / "a.csv", "NVIDIA H100", 1.0)
    b = fixture_csv(tmp_path / "b.csv", "NVIDIA H200", 0.8)
    frames = [load_result_set(a), load_result_set(b)]
    labels = label_sets([a, b], frames)
    assert labels == ["NVIDIA H100", "NVIDIA H200"]
    table = side_by_side(frames, labels)
    assert len(table) == 4
    assert table["speed-up NVIDIA H200 vs NVIDIA H100"].tolist() == pytest.approx([1.25] * 4)
    assert context_warnings(frames, labels) == []


def test_warns_on_differences_besides_the_axis(tmp_path):
    a = fixture_csv(tmp_path / "a.csv", "NVIDIA H100", 1.0, "2.11.0", 1980)
    b = fixture_csv(tmp_path / "b.csv", "NVIDIA H200", 1.0, "2.12.0", 1500)
    frames = [load_result_set(a), load_result_set(b)]
    warnings = context_warnings(frames, label_sets([a, b], frames))
    assert any(w.startswith("torch differs") for w in warnings)
    assert any(w.startswith("SM clocks differ") for w in warnings)
    assert not any(w.startswith("gpu") for w in warnings)


def test_cli_compare_writes_plots(tmp_path):
    a = fixture_csv(tmp_path / "a.csv", "NVIDIA H100", 1.0)
    b = fixture_csv(tmp_path / "b.csv", "NVIDIA H200", 0.8)
    res = runner.invoke(app, ["compare", str(a), str(b), "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert "1.25" in res.output
    assert (tmp_path / "cmp" / "compare_time.png").exists()
    assert (tmp_path / "cmp" / "compare_speedup.png").exists()


def test_compare_rejects_a_foreign_csv(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1,2\n")
    res = runner.invoke(app, ["compare", str(bad), str(bad)])
    assert res.exit_code == 2 and "not a trainperf llama CSV" in res.output


def llama_rows(gpu, setups, scale=1.0, repeat=1):
    """Rows of a llama CSV: each (backend, compile, swaps) at 1x16384 and 12x1024."""
    rows = []
    for _ in range(repeat):
        for backend, compile, swaps, t in setups:
            for b, n, f in ((1, 16384, 1.8), (12, 1024, 1.0)):
                rows.append({"backend": backend, "batch_size": b, "seq_len": n, "mean_s": t * f * scale,
                             "status": "ok", "kv_heads": "native", "swaps": swaps, "gpu": gpu,
                             "dtype": "bf16", "compile": compile, "inputs": "embeds",
                             "optimizer": "sgd", "layers": None})
    return pd.DataFrame(rows)


def test_rows_pair_only_when_their_whole_setup_matches(tmp_path):
    h100 = tmp_path / "h100.csv"
    h200 = tmp_path / "h200.csv"
    llama_rows("NVIDIA H100", [("CUDNN_ATTENTION", "off", "none", 0.24),
                               ("CUDNN_ATTENTION", "layers", "loss=chunked", 0.17)]).to_csv(h100, index=False)
    llama_rows("NVIDIA H200", [("CUDNN_ATTENTION", "off", "none", 0.20),
                               ("FLASH_ATTENTION", "off", "none", 0.30)]).to_csv(h200, index=False)
    frames = [load_result_set(h100), load_result_set(h200)]
    labels = label_sets([h100, h200], frames)
    table = side_by_side(frames, labels)
    speed = "speed-up NVIDIA H200 vs NVIDIA H100"
    paired = table.dropna(subset=[speed])
    # only stock cuDNN pairs with stock cuDNN; the --fast row and the flash row stand alone
    setups = set(zip(paired.backend, paired.compile, paired.swaps, strict=True))
    assert setups == {("CUDNN_ATTENTION", "off", "none")}
    assert paired[speed].tolist() == pytest.approx([0.24 / 0.20] * 2)
    fast = table[table.compile == "layers"]
    assert len(fast) == 2 and fast["NVIDIA H200"].isna().all()
    flash = table[table.backend == "FLASH_ATTENTION"]
    assert len(flash) == 2 and flash["NVIDIA H100"].isna().all()
    warnings = pairing_warnings(frames, labels, table)
    assert any("4 case(s) measured in only some sets" in w for w in warnings)
    res = runner.invoke(app, ["compare", str(h100), str(h200), "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cmp" / "compare_time.png").stat().st_size > 0
    assert (tmp_path / "cmp" / "compare_speedup.png").stat().st_size > 0


def test_repeated_cases_keep_the_latest_and_plot(tmp_path):
    a = tmp_path / "a.csv"
    b = tmp_path / "b.csv"
    twice = llama_rows("NVIDIA H100", [("CUDNN_ATTENTION", "off", "none", 0.24)], repeat=2)
    twice.loc[2:, "mean_s"] = twice.loc[2:, "mean_s"] / 2  # the second measurement is the latest
    twice.to_csv(a, index=False)
    llama_rows("NVIDIA H200", [("CUDNN_ATTENTION", "off", "none", 0.12)]).to_csv(b, index=False)
    frames = [load_result_set(a), load_result_set(b)]
    labels = label_sets([a, b], frames)
    table = side_by_side(frames, labels)
    assert len(table) == 2
    assert table["speed-up NVIDIA H200 vs NVIDIA H100"].tolist() == pytest.approx([1.0, 1.0])
    assert any("2 repeated case(s)" in w for w in pairing_warnings(frames, labels, table))
    res = runner.invoke(app, ["compare", str(a), str(b), "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output


def test_the_same_set_twice_compares_to_itself(tmp_path):
    a = fixture_csv(tmp_path / "a.csv", "NVIDIA H100", 1.0)
    res = runner.invoke(app, ["compare", str(a), str(a), "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert "#2" in res.output


def test_sets_without_the_newer_setup_columns_pair_without_them(tmp_path):
    a = fixture_csv(tmp_path / "a.csv", "NVIDIA H100", 1.0)  # the columns of an older CSV
    b = tmp_path / "b.csv"
    llama_rows("NVIDIA H200", [("CUDNN_ATTENTION", False, "none", 0.2)]).to_csv(b, index=False)
    frames = [load_result_set(a), load_result_set(b)]
    labels = label_sets([a, b], frames)
    table = side_by_side(frames, labels)
    assert table.dropna(subset=["speed-up NVIDIA H200 vs NVIDIA H100"]).backend.tolist() == [
        "CUDNN_ATTENTION", "CUDNN_ATTENTION"]
    assert any(w.startswith("inputs is not recorded") for w in pairing_warnings(frames, labels, table))
