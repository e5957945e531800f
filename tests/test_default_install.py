"""Every command works, or says why in one line, on a default install: a missing package, a usage
error of the CLI framework's own kind, an input file that must not be written to, a hub id
without network."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from trainperf.cli import app, run_cli
from trainperf.cli.common import LONG_VALUE, shorten_values
from trainperf.core.store import Store

# Runs trainperf's CLI in-process with a package (argv[1]) hidden from the import system; prints
# one JSON line per command: its exit code and what it wrote to stderr.
HIDDEN = r"""
import contextlib, io, json, sys, importlib.abc

class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == sys.argv[1]:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Hide())
from trainperf.cli import app, run_cli
for args in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = run_cli(app, args)
    print(json.dumps({"args": args, "rc": rc, "stderr": err.getvalue()}))
"""

TINY = ["--batch-seq", "1x16", "--iters", "1", "--warmup", "0", "--quiet"]


def test_llama_commands_without_transformers_refuse_in_one_line_after_checking_the_input(tmp_path):
    out, db = str(tmp_path / "out"), str(tmp_path / "r.db")
    where = ["--out", out, "--db", db]
    hf = "pip install 'trainperf[hf]'"
    runs = {
        "llama": (["llama", *TINY, *where], hf),
        "profile llama": (["profile", "llama", "--batch-seq", "1x16", "--out", out], hf),
        "memory llama": (["memory", "llama", "--batch-seq", "1x16", "--out", out], hf),
        "parity": (["parity", "--train-steps", "2", *where], hf),
        "cudnn-study": (["cudnn-study", "--out", out], hf),
        "llama --layers 0": (["llama", "--layers", "0", *where], "--layers must be at least 1, got 0"),
        "llama --model bogus": (["llama", "--model", "bogus", *where], "unknown --model 'bogus'"),
        "llama bad --db": (["llama", "--db", str(tmp_path / "no" / "r.db")], "--db"),
        "parity --model bogus": (["parity", "--model", "bogus", *where], "unknown --model 'bogus'"),
    }
    proc = subprocess.run([sys.executable, "-c", HIDDEN, "transformers",
                           json.dumps([args for args, _ in runs.values()])],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(runs)
    for (name, (_, expected)), result in zip(runs.items(), results, strict=True):
        lines = result["stderr"].strip().splitlines()
        assert result["rc"] == 2, (name, result)
        assert len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0], (name, lines)
        assert "Traceback" not in result["stderr"]
    assert not (tmp_path / "r.db").exists() and not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("args, expected", [
    (["llama", "--bogus"], "No such option: --bogus"),
    (["step", "--iters", "abc"], "Invalid value for '--iters'"),
    (["nope"], "No such command 'nope' (commands: step,"),
    (["suite", "run"], "Missing argument 'name'"),
    (["suite"], "Missing command (commands: list, run"),
    (["nsys-decode"], "Missing argument"),
])
def test_usage_errors_of_the_framework_are_one_line_with_a_help_hint(capsys, args, expected):
    assert run_cli(app, args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and expected in err[0] and err[0].endswith("--help'")


def test_a_long_value_is_cut_in_the_message(capsys):
    value = "x" * 5000
    assert run_cli(app, ["step", "--model", value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "(5000 characters)" in err and value not in err
    assert shorten_values("short words stay") == "short words stay"
    assert len(shorten_values("y" * (LONG_VALUE + 1))) < LONG_VALUE


def test_sqlite_inputs_are_never_written_to(tmp_path, capsys):
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    Store(store_dir / "s.db")  # a trainperf store: SQLite in WAL mode
    (tmp_path / "trunc").mkdir()
    (tmp_path / "trunc" / "t.sqlite").write_bytes((store_dir / "s.db").read_bytes()[:200])
    before = {p: sorted(p.iterdir()) for p in (store_dir, tmp_path / "trunc")}
    assert run_cli(app, ["nsys-decode", str(store_dir / "s.db")]) == 2
    assert run_cli(app, ["nsys-decode", str(tmp_path / "trunc" / "t.sqlite")]) == 2
    assert run_cli(app, ["results", "--db", str(store_dir / "s.db")]) == 0
    assert run_cli(app, ["export", "--db", str(store_dir / "s.db"), "--format", "csv"]) == 0
    assert {p: sorted(p.iterdir()) for p in before} == before
    err = capsys.readouterr().err
    assert "lacks the table(s)" in err and "is not an SQLite file" in err


def test_a_hub_id_without_network_fails_at_once_in_one_line(monkeypatch, tmp_path):
    from trainperf.models import hf_llama

    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf_llama, "HUB", ("127.0.0.1", 9))  # nothing answers there
    start = time.monotonic()
    with pytest.raises(ValueError, match="could not be fetched.*pass a local config.json"):
        hf_llama.load_config("no/such-model-xyz")
    assert time.monotonic() - start < 5
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set"):
        hf_llama.load_config("no/such-model-xyz")


def test_without_matplotlib_every_command_writes_its_files_and_says_so_once(tmp_path):
    out = tmp_path / "out"
    stores = [str(tmp_path / f"{name}.db") for name in ("a", "b")]
    runs = [
        ["step", "--model", "tiny", "--seq", "16,32", "--iters", "1", "--warmup", "0", "--out", str(out),
         "--db", stores[0]],
        *(["llama", *TINY, "--out", str(out), "--db", db] for db in stores),
        ["compare", *stores, "--out", str(out)],
        ["memory", "step", "--model", "tiny", "--seq", "16", "--out", str(out)],
        ["memory", "shard", "--model", "tiny", "--seq", "16", "--out", str(out)],
    ]
    proc = subprocess.run([sys.executable, "-c", HIDDEN, "matplotlib", json.dumps(runs)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["args"][0] for r in results] == [args[0] for args in runs]
    for r in results:
        assert r["rc"] == 0, r
        assert "Traceback" not in r["stderr"] and "RuntimeError" not in r["stderr"], r
    said = [r["stderr"].count("no plots without matplotlib") for r in results]
    assert said[:4] == [1, 0, 0, 1], said  # step and compare draw: each says it, once
    # (memory shard's ranks are spawned: matplotlib is hidden in this process alone)
    assert (out / "step.csv").exists() and not [p for p in out.glob("*.png") if "shard" not in p.name]
