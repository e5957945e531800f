import pandas as pd
import pytest
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.profiling.compare import context_warnings, label_sets, load_result_set, side_by_side
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
