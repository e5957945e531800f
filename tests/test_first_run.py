"""What a new user meets first: the default command without optional extras, only trainperf's
own output, and one clean line for a file that is not what it should be."""

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainperf.cli import app

runner = CliRunner()
SRC = str(Path(__file__).resolve().parents[1] / "src")
TINY = ["--seq", "16", "--batch", "2", "--warmup", "0", "--iters", "1", "--device", "cpu", "--quiet"]


def started(*args: str, without: str | None = None, cwd: Path) -> subprocess.Popen:
    """The CLI started in a fresh process; `without` makes importing that package fail, as on a
    machine where it is not installed."""
    hide = f"import sys; sys.modules[{without!r}] = None; " if without else ""
    code = f"{hide}from trainperf.cli import app; app({list(args)!r})"
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1"}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env=env)


def finished(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def trainperf(*args: str, without: str | None = None, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI run to its end in a fresh process (see `started`)."""
    return finished(started(*args, without=without, cwd=cwd))


def test_step_without_triton_runs_and_names_the_extra(tmp_path):
    procs = [started("step", *TINY, "--db", "r.db", "--loss", "torch,chunked", "--norm", "torch,triton",
                     "--attention", "sdpa,triton-fa2", without="triton", cwd=tmp_path),
             started("step", *TINY, "--db", "s.db", "--rope", "triton", "--swiglu", "triton",
                     without="triton", cwd=tmp_path),
             started("attention", "--attention", "triton-fa2", "--seq", "16", "--head-dim", "16", "--device",
                     "cpu", "--quiet", "--db", "a.db", without="triton", cwd=tmp_path)]  # all three at once
    res, swaps, attention = (finished(p) for p in procs)
    assert res.returncode == 0, res.stderr
    assert "ModuleNotFoundError" not in res.stderr + res.stdout
    rows = sqlite3.connect(tmp_path / "r.db").execute("SELECT status, reason, spec FROM records").fetchall()
    assert len(rows) == 8
    unsupported = [r for r in rows if r[0] == "unsupported"]
    # the six cases with a Triton norm or attention are unsupported rows naming the extra; the
    # chunked loss falls back to PyTorch, so both loss cases without Triton swaps measured
    assert len(unsupported) == 6 and all("pip install 'trainperf[triton]'" in r[1] for r in unsupported)
    assert sorted(r[0] for r in rows).count("ok") == 2
    assert swaps.returncode == 0, swaps.stderr
    assert sqlite3.connect(tmp_path / "s.db").execute("SELECT status FROM records").fetchall() == [
        ("unsupported",)]
    assert "'trainperf[triton]'" in attention.stdout


def test_profiles_print_no_tracer_lines(tmp_path):
    res = trainperf("profile", "attention", "--attention", "sdpa", "--seq", "32", "--head-dim", "16",
                    "--device", "cpu", "--out", "out", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "USDT" not in res.stderr + res.stdout
    assert "Profiler clears events" not in res.stderr
    assert "a CPU picture: each op self time stands in for kernels" in res.stdout


def not_sqlite(path: Path) -> Path:
    path.write_text("a text file, not a database\n" * 100)
    return path


def other_sqlite(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE songs (title TEXT)")
    con.commit()
    con.close()
    return path


def truncated_store(path: Path) -> Path:
    runner.invoke(app, ["step", "--model", "tiny", *TINY, "--db", str(path)])
    data = path.read_bytes()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(data[:1500])
    return path


READERS = [["results"], ["export"], ["compare", "{db}", "{db}"]]
WRITERS = [["step", "--model", "tiny", *TINY]]


@pytest.mark.parametrize("make, message", [
    (not_sqlite, "not an SQLite file"),
    (other_sqlite, "an SQLite file of another program (tables songs)"),
    (truncated_store, "not an SQLite file, or a damaged one"),
    (lambda p: p.parent, "is a folder"),
    (lambda p: p.parent / "missing" / "r.db", "folder '{parent}' does not exist"),
])
@pytest.mark.parametrize("command", READERS + WRITERS)
def test_a_bad_store_is_one_line_and_exit_2(tmp_path, make, message, command):
    path = make(tmp_path / "r.db")
    args = [a.replace("{db}", str(path)) for a in command]
    if "compare" not in args:
        args += ["--db", str(path)]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    if command in READERS and not path.parent.exists():  # reading needs the file itself
        message = "no such file"
    assert str(path) in res.output and message.format(parent=path.parent) in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    if make is other_sqlite:  # someone else's database is left as it was
        tables = sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall()
        assert tables == [("songs",)]


def test_nsys_decode_of_a_bad_file_and_no_cpu_note(tmp_path):
    res = runner.invoke(app, ["nsys-decode", str(not_sqlite(tmp_path / "t.sqlite"))])
    assert res.exit_code == 2 and "is not an SQLite file" in res.output
    res = runner.invoke(app, ["nsys-decode", str(other_sqlite(tmp_path / "o.sqlite"))])
    assert res.exit_code == 2 and "lacks the table(s)" in res.output


def test_the_default_command_without_matplotlib_names_the_plots_extra(tmp_path):
    res = trainperf("step", *[a for a in TINY if a != "--quiet"], "--db", "r.db", without="matplotlib",
                    cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "no plots without matplotlib: pip install 'trainperf[plots]'" in res.stderr
