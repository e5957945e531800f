"""Faults survived, proven with real ones: a sweep killed with SIGKILL mid-case, the CLI stopped
with SIGINT, a collective that returns a wrong result, and two sweeps of the same cases at once."""

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from trainperf.core import store as store_module
from trainperf.core.record import Record, case_key_for
from trainperf.core.runner import measure_case, run_sweep
from trainperf.core.store import Store, this_machine

SRC = str(Path(__file__).parents[1] / "src")
ENV = {"device": "cpu"}


def python(code: str, *args: str, cwd: Path, new_session: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=new_session)


def wait_for(predicate, proc: subprocess.Popen | None = None, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended first: {proc.communicate()[1]}")
        if time.monotonic() > end:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


def count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        return sqlite3.connect(db, timeout=5).execute("SELECT COUNT(*) FROM records").fetchone()[0]
    except sqlite3.OperationalError:  # the table is not there yet
        return 0


SWEEP = """
    import sys, time
    from trainperf.core.runner import run_sweep
    from trainperf.core.store import Store

    stop_at = int(sys.argv[2])

    def measure(spec):
        if spec["i"] == stop_at:
            time.sleep(1000)  # killed here, mid-case, with the write-ahead log open
        return {"value": spec["i"]}

    run_sweep("t", [{"i": i} for i in range(8)], measure, Store(sys.argv[1]), {"device": "cpu"}, quiet=True)
"""


def test_a_sweep_killed_with_sigkill_loses_nothing_it_finished_and_resumes(tmp_path):
    db = tmp_path / "r.db"
    proc = python(SWEEP, str(db), "5", cwd=tmp_path)
    try:
        wait_for(lambda: count(db) == 5, proc)
        time.sleep(0.3)  # inside case 5 now
    finally:
        proc.kill()
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    store = Store(db)
    assert [r.metrics["value"] for r in store.records()] == list(range(5))
    measured = []
    specs = [{"i": i} for i in range(8)]
    run_sweep("t", specs, lambda s: measured.append(s["i"]) or {"value": s["i"]}, store, ENV, quiet=True)
    assert measured == [5, 6, 7]  # only what was not finished
    assert sorted(r.metrics["value"] for r in store.records()) == list(range(8))


def _stop_a_step_sweep(tmp_path: Path, code: str, sig: signal.Signals) -> tuple[subprocess.Popen, str, Path]:
    """Run `code` as the CLI on a step sweep of eight cases, send `sig` once one case is stored;
    the process, its stderr and its store."""
    db = tmp_path / "r.db"
    proc = python(code, "step", "--model", "tiny", "--seq", "16,24,32,40,48,56,64,72", "--batch", "2",
                  "--iters", "300", "--warmup", "1", "--device", "cpu", "--quiet", "--db", str(db),
                  "--out", str(tmp_path / "out"), cwd=tmp_path)
    try:
        wait_for(lambda: count(db) >= 1, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc, err, db


# Python leaves SIGINT ignored where it starts ignored (a background job of a script): the CLI's
# own handling is under test, so the child takes Python's default handler first.
@pytest.mark.parametrize(("sig", "code"), [
    (signal.SIGINT, "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                    "from trainperf.cli import app; app()"),
    (signal.SIGTERM, "from trainperf.cli import main; main()")])  # a Slurm time limit, `timeout`
def test_the_cli_stopped_with_sigint_or_sigterm_says_what_it_kept_and_exits_130(tmp_path, sig, code):
    proc, err, db = _stop_a_step_sweep(tmp_path, code, sig)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "every finished case is in the store" in err
    kept = count(db)
    assert 1 <= kept < 8
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # the finished cases' table is written too, and the message names it
    table = tmp_path / "out" / "step.csv"
    assert f"finished case(s) are in {table}" in " ".join(err.split())
    assert len(pd.read_csv(table)) == kept


def test_a_process_forked_from_the_cli_ends_at_sigterm(tmp_path):
    # a pool's workers forked after the CLI took SIGTERM: the pool's terminate() must still end them
    code = """
        import multiprocessing, signal, time
        from trainperf.core.sigint import take_sigterm_as_interrupt
        take_sigterm_as_interrupt()
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
        child.start()
        time.sleep(0.5)
        child.terminate()
        child.join(10)
        print(child.exitcode)
    """
    proc = python(code, cwd=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert out.strip() == str(-signal.SIGTERM), err


def test_a_rank_of_a_launch_ends_at_sigterm_as_its_launcher_expects(tmp_path):
    code = ("import os; os.environ.update(RANK='0', WORLD_SIZE='1')  # as torchrun starts a rank\n"
            "from trainperf.cli import main; main()")
    proc, err, db = _stop_a_step_sweep(tmp_path, code, signal.SIGTERM)
    assert proc.returncode == -signal.SIGTERM, err
    assert count(db) >= 1 and "interrupted" not in err


def gone(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie that nobody reaped yet counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


# A command inside one long native call, as in a CuTe compile: sum() over a range runs in C and
# does not return to the interpreter, so Python's SIGINT handler waits for it.
IN_NATIVE_CODE = """
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from trainperf.cli.interrupts import stop_at_second_interrupt

    print(stop_at_second_interrupt().pid, flush=True)
    if sys.argv[1] == "native":
        sum(range(10**13))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_second_sigint_stops_a_command_at_once_inside_native_code(tmp_path):
    proc = python(IN_NATIVE_CODE, "native", cwd=tmp_path)
    try:
        watcher = int(proc.stdout.readline())
        time.sleep(0.5)  # into the native call: a Ctrl-C before it is an ordinary KeyboardInterrupt
        proc.send_signal(signal.SIGINT)
        time.sleep(1.5)
        assert proc.poll() is None  # the first Ctrl-C waits for the native call, and kills nothing
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert "interrupted twice: stopped at once; every finished case is in the store" in proc.stderr.read()
    wait_for(lambda: gone(watcher), timeout=20)


def test_sigints_that_arrive_together_count_as_one_interrupt():
    """`timeout -s INT` signals the command and its process group at once: one interrupt, not two."""
    from trainperf.cli import interrupts

    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    watcher = subprocess.Popen([sys.executable, "-S", "-c", interrupts.WATCHER, str(target.pid),
                                str(interrupts.TOGETHER_S)], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        watcher.stdin.write(bytes([signal.SIGINT, signal.SIGINT]))
        watcher.stdin.flush()
        time.sleep(3 * interrupts.TOGETHER_S)
        assert target.poll() is None and watcher.poll() is None
        watcher.stdin.write(bytes([signal.SIGINT]))  # a second Ctrl-C, later
        watcher.stdin.flush()
        assert target.wait(timeout=20) == -signal.SIGKILL
        assert b"interrupted twice" in watcher.stderr.read()
    finally:
        target.kill()
        watcher.kill()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_the_watcher_of_a_second_sigint_ends_with_its_command(tmp_path):
    proc = python(IN_NATIVE_CODE, "done", cwd=tmp_path)
    watcher = int(proc.stdout.readline())
    assert proc.wait(timeout=60) == 0
    wait_for(lambda: gone(watcher), timeout=20)


def test_a_collective_that_returns_a_wrong_result_is_an_error_record(tmp_path, monkeypatch):
    """A test double at the collective: all_reduce doubles the buffer instead of summing it over
    the (one) rank. The check catches it on every rank and the case is an `error` record."""
    import torch.distributed as dist

    from trainperf.workloads import comm

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        spec = comm.CommSpec(op="all_reduce", bytes=4096, world_size=1, dist_backend="gloo", warmup=1,
                             iters=2)
        device = torch.device("cpu")
        good = measure_case("comm", spec, lambda s: comm.measure_comm(s, 0, 1, device), ENV)
        assert good.status == "ok" and good.metrics["correct"] is True

        real = dist.all_reduce

        def wrong(tensor, *args, **kwargs):
            if tensor.numel() > 1:  # the measured buffer; the 1-element check flag stays honest
                tensor.mul_(2)
                return None
            return real(tensor, *args, **kwargs)

        monkeypatch.setattr(comm.dist, "all_reduce", wrong)
        bad = measure_case("comm", spec, lambda s: comm.measure_comm(s, 0, 1, device), ENV)
        assert bad.status == "error" and "wrong result" in bad.reason
    finally:
        dist.destroy_process_group()


SAME_CASES = """
    import os, pathlib, sys, time
    from trainperf.core.runner import run_sweep
    from trainperf.core.store import Store

    def measure(spec):
        time.sleep(0.05)
        return {"value": spec["i"], "pid": os.getpid()}

    if sys.argv[2:]:  # the sweeps start together: wait until every one is here
        pathlib.Path(f"{os.getpid()}.here").touch()
        while len(list(pathlib.Path().glob("*.here"))) < int(sys.argv[3]):
            time.sleep(0.01)
    run_sweep("t", [{"i": i} for i in range(12)], measure, Store(sys.argv[1]), {"device": "cpu"}, quiet=True,
              rerun=sys.argv[2:3] == ["rerun"])
"""


@pytest.mark.parametrize("rerun", [False, True])
def test_two_sweeps_of_the_same_cases_at_once_measure_each_case_once(tmp_path, rerun):
    db = tmp_path / "r.db"
    Store(db)  # created before both start, as a second command would find it
    if rerun:  # every case stored already: both sweeps measure again, each case once between them
        python(SAME_CASES, str(db), cwd=tmp_path).communicate(timeout=120)
    procs = [python(SAME_CASES, str(db), "rerun" if rerun else "once", "2", cwd=tmp_path) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    records = Store(db).records()[12 if rerun else 0:]
    assert sorted(r.spec["i"] for r in records) == list(range(12))  # no duplicates, nothing missing
    assert len({r.run_id for r in records}) == 2  # both sweeps measured
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_reader_during_writes_sees_whole_records(tmp_path):
    db = tmp_path / "r.db"
    store = Store(db)
    writer = python(SAME_CASES, str(db), cwd=tmp_path)
    seen = []
    while writer.poll() is None:
        records = Store(db, create=False).records()
        assert all(isinstance(r.metrics.get("value"), int) for r in records)
        seen.append(len(records))
        time.sleep(0.01)
    assert writer.returncode == 0 and len(store.records()) == 12
    assert seen == sorted(seen)  # a reader never saw records disappear


@pytest.mark.parametrize("status", ["ok", "oom", "unsupported"])
def test_finished_records_of_every_kind_are_not_measured_again(db, status):
    store = Store(db)
    store.append(Record("t", {"value": 1}, status, env=ENV))
    measured = []
    run_sweep("t", [{"value": 1}], lambda s: measured.append(s) or {}, store, ENV, quiet=True)
    assert measured == []


def test_an_unsupported_row_for_a_missing_package_is_tried_again_and_one_for_the_hardware_is_not(db):
    store = Store(db)
    store.append(Record("t", {"value": 1}, "unsupported", reason="liger needs pip install "
                        "'trainperf[liger]' (liger-kernel)", env=ENV))
    store.append(Record("t", {"value": 2}, "unsupported", reason="needs a GPU with float8 tensor cores",
                        env=ENV))
    measured = []
    records = run_sweep("t", [{"value": 1}, {"value": 2}], lambda s: measured.append(s) or {}, store, ENV,
                        quiet=True)
    assert measured == [{"value": 1}]  # installed since: it runs; the GPU has not changed
    assert [r.status for r in records] == ["ok", "unsupported"]
    assert store.settled_case(records[0].key).status == "ok"


def _leave_claim(db: Path, key: str, host: str, pid: int, seen_at: float) -> None:
    con = sqlite3.connect(db)
    with con:
        con.execute("INSERT INTO claims (case_key, owner, host, pid, seen_at) VALUES (?, 'other', ?, ?, ?)",
                    (key, host, pid, seen_at))
    con.close()


def test_a_claim_held_by_a_live_sweep_blocks_and_one_of_a_dead_process_is_taken_over(db):
    store = Store(db)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    _leave_claim(db, "k-dead", this_machine(), int(dead.stdout), time.time())
    _leave_claim(db, "k-live", this_machine(), os.getpid(), 0)
    assert store.claim("k-dead", "me")  # its process is gone: a killed sweep does not block the case
    assert not store.claim("k-live", "me")  # a live sweep is measuring it
    store.release("k-live", "other")
    assert store.claim("k-live", "me")


def test_another_machines_claim_blocks_while_it_is_marked_and_is_taken_over_when_not(db):
    store = Store(db)
    # a container of this host name on another machine: its pid (alive here) says nothing
    other = f"{socket.gethostname()} another-boot"
    _leave_claim(db, "k-marked", other, os.getpid(), time.time() - store_module.STALE_S / 2)
    _leave_claim(db, "k-stale", other, os.getpid(), time.time() - store_module.STALE_S - 1)
    assert not store.claim("k-marked", "me")
    assert store.claim("k-stale", "me")
    # a sweep on another machine killed inside a case: resumed here, it measures the case at once
    _leave_claim(db, str(case_key_for("t", {"i": 0}, ENV)), other, 1, 0)
    records: list[Record] = []
    sweep = threading.Thread(target=lambda: records.extend(
        run_sweep("t", [{"i": 0}], lambda s: {"v": 1}, store, ENV, quiet=True)), daemon=True)
    sweep.start()
    sweep.join(30)  # a sweep that waits on the claim would wait for ever
    assert [r.status for r in records] == ["ok"]


def test_a_sweep_marks_the_claim_of_the_case_it_measures_and_releases_it_after(db, monkeypatch):
    monkeypatch.setattr(store_module, "HEARTBEAT_S", 0.05)
    store = Store(db)
    assert store.claim("k", "me")

    def seen_at() -> float:
        con = sqlite3.connect(db)
        try:
            return con.execute("SELECT seen_at FROM claims WHERE case_key='k'").fetchone()[0]
        finally:
            con.close()

    first = seen_at()
    with store.holding("k", "me"):
        time.sleep(0.5)
        assert seen_at() > first
    assert store.claims_of("me") == []


def test_a_store_made_before_claims_were_marked_gains_the_mark_and_its_claims_are_stale(db):
    con = sqlite3.connect(db)
    with con:
        con.execute("CREATE TABLE claims (case_key TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT NULL,"
                    " pid INTEGER NOT NULL)")
        con.execute("INSERT INTO claims VALUES ('k', 'other', 'a node of the last job', 4242)")
    con.close()
    assert Store(db).claim("k", "me")


def _ranked_worker(rank: int, world: int, db: str) -> None:
    """Three cases in lockstep without a supervisor (as under torchrun); rank 1 raises in case 0."""
    from trainperf.distributed.ranked_sweep import run_ranked_cases

    def measure(spec, rank, world, device):
        if rank == 1 and spec["i"] == 0:
            raise ValueError("rank 1 broke")
        return {"value": spec["i"]}

    cases = [(i, {"i": i}) for i in range(3)]
    run_ranked_cases(rank, world, "t", cases, measure, torch.device("cpu"), db, ENV)


def measure_all_reduce(spec, rank, world, device):
    """A case of timed all-reduces (where TRAINPERF_FAULT strikes)."""
    import torch.distributed as dist

    from trainperf.distributed.timing import per_rank_times

    x = torch.ones(1024)
    times = per_rank_times(lambda: dist.all_reduce(x), device, 6)
    return {"ms": max(max(t) for t in times), "sum": x[0].item()}


def _lives_with_parent(proc: Path) -> bool:
    command = (proc / "cmdline").read_bytes()
    return b"resource_tracker" in command or b"forkserver" in command


def _children() -> list[str]:
    """Processes whose parent is this one (Linux /proc), but multiprocessing's resource tracker and
    fork server (CPU ranks fork from it), which live as long as their parent by design."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            parent = (proc / "stat").read_text().split(") ")[1].split()[1] if proc.name.isdigit() else None
            if parent == str(os.getpid()) and not _lives_with_parent(proc):
                found.append(proc.name)
        except (OSError, IndexError):
            continue
    return found


def test_without_a_supervisor_a_rank_that_raises_is_named_in_its_case_s_record_and_the_other_cases_run(db):
    from trainperf.distributed.launch import launch

    launch(_ranked_worker, 2, "gloo", args=(str(db),), timeout_s=30)
    records = {r.spec["i"]: r for r in Store(db).records()}
    assert records[0].status == "error" and records[0].reason == "rank 1: ValueError: rank 1 broke"
    assert records[1].status == records[2].status == "ok"


@pytest.mark.parametrize("fault, status, rank, reason", [
    ("oom:0:1:3", "oom", 0, "out of memory (injected)"),
    ("raise:1:1:3", "error", 1, "RuntimeError: injected fault on rank 1"),
    ("kill:1:1:3", "error", 1, "the process was killed by SIGKILL"),
    ("hang:1:1:3", "error", 1, "stopped responding for 3 s in heartbeat.py (inject_fault)"),
    ("stop:1:1:3", "error", 1, "stopped responding for 3 s (the process is stopped: SIGSTOP"),
    ("spin:0:1:3", "error", 0, "stopped responding for 3 s (native code holds its interpreter; last seen"),
])
def test_a_failing_rank_ends_its_case_in_seconds_as_a_record_and_the_next_case_runs(
        db, tmp_path, monkeypatch, fault, status, rank, reason):
    from trainperf.distributed.supervisor import Supervisor

    monkeypatch.setenv("TRAINPERF_FAULT", fault)
    said, told = [], []
    supervisor = Supervisor("t", measure_all_reduce, 2, "gloo", db, ENV, tmp_path / "logs", timeout_s=60,
                            stall_s=3, say=said.append,
                            on_progress=lambda done, spec, status: told.append((done, spec["i"], status)))
    start = time.monotonic()
    failed = supervisor.run([(i, {"i": i}) for i in range(3)])
    assert told == [(1, 0, "ok"), (2, 1, status), (3, 2, "ok")]  # each case once, in order, across groups
    assert time.monotonic() - start < 60
    records = {r.spec["i"]: r for r in Store(db).records()}
    assert [r.spec["i"] for r in failed] == [1]
    bad = records[1]
    assert bad.status == status and bad.reason.startswith(f"rank {rank}: {reason}"), bad.reason
    assert bad.metrics["failed_rank"] == rank and 0 <= bad.metrics["detect_s"] < 10
    assert Path(bad.metrics["log"]) == tmp_path / "logs" / f"t-rank{rank}.log"
    assert records[0].status == records[2].status == "ok"
    assert records[2].metrics["sum"] == 2.0**6  # six all-reduces of ones: the fresh group computes right
    assert len(said) == 1 and reason in said[0] and "log" in said[0]
    wait_for_none = time.monotonic() + 10
    while _children() and time.monotonic() < wait_for_none:
        time.sleep(0.1)
    assert _children() == []


def test_a_rank_stuck_outside_timed_steps_is_ended_at_the_timeout(db, tmp_path, monkeypatch):
    from trainperf.distributed.supervisor import Supervisor

    supervisor = Supervisor("t", measure_stuck_building, 2, "gloo", db, ENV, tmp_path / "logs", timeout_s=4,
                            say=lambda line: None)
    start = time.monotonic()
    supervisor.run([(0, {"i": 0}), (1, {"i": 1})])
    assert time.monotonic() - start < 40
    records = {r.spec["i"]: r for r in Store(db).records()}
    assert records[0].status == "error" and "stopped responding for 4 s" in records[0].reason
    assert records[1].status == "ok"


def measure_stuck_building(spec, rank, world, device):
    if spec["i"] == 0 and rank == 0:
        time.sleep(1000)  # as a compile or a build that never ends
    return measure_all_reduce(spec, rank, world, device)


def test_a_ctrl_c_a_library_swallowed_stops_the_sweep_after_the_case_in_flight(db):
    """As in torch.compile's caches: the KeyboardInterrupt is raised inside a weakref callback,
    where the interpreter reports it as ignored and carries on."""
    import weakref

    from trainperf.core import sigint

    original = signal.signal(signal.SIGINT, signal.default_int_handler)  # as at the CLI's start
    try:
        sigint.remember_sigint()

        def measure(spec: dict) -> dict:
            if spec["i"] == 1:
                class Cache:
                    pass
                entry = Cache()
                keep = weakref.ref(entry, lambda _: signal.raise_signal(signal.SIGINT))  # noqa: F841
                del entry  # the callback runs, and the interrupt inside it is swallowed
            return {"value": spec["i"]}

        store = Store(db)
        with pytest.raises(KeyboardInterrupt, match="after the case in flight"):
            run_sweep("t", [{"i": i} for i in range(4)], measure, store, ENV, quiet=True)
        assert [r.metrics["value"] for r in store.records()] == [0, 1]
        resumed = run_sweep("t", [{"i": i} for i in range(4)], measure, store, ENV, quiet=True)
        assert [r.metrics["value"] for r in resumed] == [0, 1, 2, 3]  # a new sweep starts with none on record
    finally:
        signal.signal(signal.SIGINT, original)


_POOL_SCRIPT = """
import signal, sys, threading, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from trainperf.core.sigint import quiet_forkserver

signal.signal(signal.SIGINT, signal.default_int_handler)  # as at the CLI's start, whoever started the tests
if sys.argv[1] != "stock":
    quiet_forkserver()
pool = ProcessPoolExecutor(2, mp_context=get_context("forkserver"))  # as quack's compile pool
if sys.argv[1] == "quiet-thread":  # its workers (and the fork server) started from another thread
    starter = threading.Thread(target=lambda: pool.submit(abs, -1).result())
    starter.start()
    starter.join()
pool.submit(abs, -1).result()  # its workers are up, waiting for work
print("ready", flush=True)
try:
    time.sleep(60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
pool.shutdown()
"""


@pytest.mark.parametrize("mode", ["quiet", "quiet-thread", "stock"])
def test_a_ctrl_c_to_the_process_group_reaches_trainperf_not_a_library_pools_workers(mode, tmp_path):
    """A terminal's Ctrl-C goes to every process of the group: without quiet_forkserver each idle
    worker of a fork-server pool prints a KeyboardInterrupt traceback (the stock run shows the test
    can fail); with it only the main process hears the signal, whichever thread started the pool."""
    proc = python(_POOL_SCRIPT, mode, cwd=tmp_path, new_session=True)  # its own group, as a terminal's
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "interrupted" in out
    if mode != "stock":
        assert "KeyboardInterrupt" not in err and "Traceback" not in err, err
    else:
        assert "KeyboardInterrupt" in err  # what a library pool's workers print without the guard


_SWALLOWED_SCRIPT = """
import signal, sys, weakref
signal.signal(signal.SIGINT, signal.default_int_handler)  # as at the CLI's start
from trainperf.core import sigint

if sys.argv[1] == "remembered":
    sigint.remember_sigint()


class Cache:
    pass


entry = Cache()
keep = weakref.ref(entry, lambda _: signal.raise_signal(signal.SIGINT))
del entry  # as in torch.compile's caches: the interrupt is raised inside the weakref callback
print("swallowed" if sigint.swallowed() else "not on record", flush=True)
"""


@pytest.mark.parametrize("mode", ["remembered", "stock"])
def test_a_ctrl_c_raised_where_the_interpreter_cannot_raise_it_is_remembered_and_not_printed(mode, tmp_path):
    """The interpreter reports a KeyboardInterrupt in a weakref callback as "Exception ignored in"
    with a traceback (the stock run shows the test can fail); trainperf remembers it silently."""
    out, err = python(_SWALLOWED_SCRIPT, mode, cwd=tmp_path).communicate(timeout=60)
    if mode == "remembered":
        assert out.strip() == "swallowed" and err == "", err
    else:
        assert "Exception ignored" in err and "KeyboardInterrupt" in err


_BUSY_POOL_SCRIPT = """
import sys, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from trainperf.core.sigint import end_worker_processes, quiet_forkserver

quiet_forkserver()
pool = ProcessPoolExecutor(2, mp_context=get_context("forkserver"))  # as quack's compile pool
work = [pool.submit(time.sleep, 120) for _ in range(4)]  # a compile for the case a Ctrl-C stops
time.sleep(1)
end_worker_processes()
print("ended", flush=True)
"""


def test_the_workers_of_a_library_pool_end_with_an_interrupted_command(tmp_path):
    """At exit the interpreter waits for every task a pool was given (here 2 x 120 s a worker);
    ended, the command leaves at once."""
    started = time.monotonic()
    proc = python(_BUSY_POOL_SCRIPT, cwd=tmp_path)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert out.strip() == "ended" and "Traceback" not in err, err
    assert time.monotonic() - started < 30


def test_a_loop_of_long_calls_is_held_to_its_own_usual_call_not_an_earlier_loop_s(tmp_path):
    from trainperf.distributed.heartbeat import Heartbeat, install, timed_loop

    beat = Heartbeat(tmp_path / "beat.json", rank=0, device=torch.device("cpu"))
    install(beat)
    try:
        beat.start_case(0)
        with timed_loop():  # short calls: the step without synchronisation
            for _ in range(3):
                timed_loop.call()
        assert beat.state()["call_s"] < 0.1
        with timed_loop():  # the synchronised step's first call: no usual length of its own yet
            timed_loop.call()
            assert beat.state()["call_s"] is None
            time.sleep(0.3)
            timed_loop.call()
            assert beat.state()["call_s"] >= 0.3
    finally:
        install(None)


def test_a_beat_read_before_a_case_starts_never_lands_after_the_case_s_own_write(tmp_path):
    """The thread's beat reads the state, then the main thread starts a case: the file ends up
    naming the new case, whatever order the two writes come in."""
    from trainperf.distributed.heartbeat import Heartbeat

    go, read, written = threading.Event(), threading.Event(), threading.Event()

    class OneSlowBeat(Heartbeat):
        def _beat(self):
            go.wait(5)
            self._write()
            written.set()

        def state(self):
            state = super().state()
            if threading.current_thread().name == "trainperf-heartbeat":
                read.set()
                time.sleep(0.3)  # the main thread starts the next case between this read and its write
            return state

    path = tmp_path / "beat.json"
    beat = OneSlowBeat(path, rank=0, device=torch.device("cpu"))
    beat.start_case(0)
    go.set()
    assert read.wait(5)
    beat.start_case(1)
    assert written.wait(5)
    assert json.loads(path.read_text())["case"] == 1


# Inductor, when a Ctrl-C also reaches the compiler it started (ptxas, g++), logs the failed
# kernel's source and a traceback while the interrupt unwinds: this stand-in logs as it does,
# writes to the descriptors beneath Python as a compiler does, and prints, then lets it go on.
NOISY_COMPILE = """
    import logging, os, signal, sys
    from pathlib import Path
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import torch._inductor.compile_fx as inductor

    compile_fx = inductor.compile_fx

    def noisy_compile(*args, **kwargs):
        Path("compiling").touch()
        try:
            return compile_fx(*args, **kwargs)
        except BaseException:
            source = "\\n".join(f"  .reg .b32 %r{i};" for i in range(2000))
            logging.getLogger("torch._inductor").error("compile failed: ptxas\\n%s", source)
            os.write(2, b"g++: fatal error: Killed signal terminated program cc1plus\\n")
            print("a library's print")
            raise

    inductor.compile_fx = noisy_compile
    sys.argv = ["trainperf", *sys.argv[1:]]
    from trainperf.cli import main
    main()
"""


COMMANDS = {"step": ["step", "--model", "tiny", "--seq", "32", "--batch", "2", "--compile", "on", "--device",
                      "cpu", "--quiet", "--db", "r.db", "--out", "o"],
            # a suite's console is teed to its console.txt through Python's streams too
            "suite": ["suite", "run", "peers", "--part", "llama", "--quiet", "--db", "r.db",
                      "--results", "res"]}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_ctrl_c_during_a_compile_prints_trainperf_s_line_and_nothing_of_a_library_s(tmp_path, command):
    proc = python(NOISY_COMPILE, *COMMANDS[command], cwd=tmp_path,
                  new_session=True)  # its own group, as a terminal's foreground job
    try:
        wait_for(lambda: (tmp_path / "compiling").exists(), proc)
        time.sleep(0.5)  # inside Inductor's compile, its compiler running
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    lines = [line for line in (out + err).splitlines() if line.strip()]
    if command == "step":
        assert len(lines) == 1 and lines[0].startswith("interrupted: "), "\n".join(lines[:20])
        return
    kept = [*lines, *(tmp_path / "res").rglob("console.txt").__next__().read_text().splitlines()]
    noise = [line for line in kept if any(word in line for word in (".reg", "ptxas", "g++", "print"))]
    assert not noise, "\n".join(noise[:20])
    assert lines[-1].startswith("interrupted: suite peers stopped in part llama"), "\n".join(lines[:20])


def test_a_rank_waited_for_in_a_synchronize_while_its_peers_sit_in_a_collective_is_named():
    """A GPU kernel that never ends: its rank's main thread waits in torch (a synchronize), alive
    and beating, as its peers do in the collective; the one outside the collective is named."""
    from trainperf.distributed.supervisor import TORCH_DIR, _stall

    now = time.time()
    beat = dict(t=now, case=2, calls=4, timed=True, call_s=0.1, done=2, peak_gb=1.0)
    beats = {0: {**beat, "where": f"{TORCH_DIR}/distributed/distributed_c10d.py:4000 all_reduce"},
             1: {**beat, "where": f"{TORCH_DIR}/cuda/__init__.py:1000 synchronize"},
             2: {**beat, "where": f"{TORCH_DIR}/distributed/distributed_c10d.py:4000 all_reduce"}}
    failure = _stall(beats, now - 12, 10.0, now, [1, 2, 3])
    assert failure.rank == 1 and failure.case == 2
    assert failure.reason == "stopped responding for 10 s in __init__.py (synchronize)"
    every = _stall({0: beats[0], 2: beats[2]}, now - 12, 10.0, now, [1, 3])
    assert every.rank is None  # no rank stands out: blame no one
