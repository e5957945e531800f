"""Beyond one host, on the CPU: two torchrun agents on localhost (c10d rendezvous, gloo), one rank
each, stand in for two nodes; and the rank resolution of a Slurm job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainperf.core.store import Store
from trainperf.distributed.launch import existing_launch, free_port, placement

SRC = str(Path(__file__).parents[1] / "src")


def launch_env(**extra: str) -> dict[str, str]:
    """This environment for a launcher's ranks, less the test suite's Triton interpreter (a slower
    start of every rank, to no purpose here) and any fault not asked for."""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}
    for name in ("TRITON_INTERPRET", *(() if "TRAINPERF_FAULT" in extra else ("TRAINPERF_FAULT",))):
        env.pop(name, None)
    return env
TINY = {
    "comm": ["--bytes", "64K,128K", "--op", "all_reduce", "--iters", "2", "--warmup", "1"],
    "ddp": ["--variant", "naive,bucketed", "--iters", "1", "--warmup", "0"],
    "shard": ["--seq", "16", "--iters", "1", "--warmup", "0"],
}


def two_agents(command: str, tmp_path: Path, *extra: str) -> list[tuple[subprocess.CompletedProcess, Path]]:
    """Run `trainperf COMMAND` under two torchrun agents, each in a folder of its own (its store,
    its output folder), as on two hosts."""
    port, procs, env = free_port(), [], launch_env()
    for node in (0, 1):
        folder = tmp_path / f"node{node}"
        folder.mkdir()
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--node-rank", str(node), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "-m", "trainperf", command, "--dist-backend", "gloo", "--world-size", "2", *TINY[command],
                *extra]
        procs.append((subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True), folder))
    return [(subprocess.CompletedProcess(p.args, p.wait(timeout=300), p.stdout.read(), ""), f)
            for p, f in procs]


@pytest.mark.parametrize("command, cases", [("comm", 2), ("ddp", 2), ("shard", 1)])
def test_two_agents_one_table_one_store_each_case_once(tmp_path, command, cases):
    ran = two_agents(command, tmp_path)
    for proc, _ in ran:
        assert proc.returncode == 0, proc.stdout[-3000:]
    speaking = [(proc, folder) for proc, folder in ran if f"trainperf {command}" in proc.stdout]
    assert len(speaking) == 1, [p.stdout[-1500:] for p, _ in ran]  # global rank 0's agent alone
    proc, folder = speaking[0]
    records = Store(folder / "trainperf.db").records()
    assert len(records) == cases and all(r.status == "ok" for r in records), [r.reason for r in records]
    assert len({r.key for r in records}) == cases
    assert {(r.metrics["launcher"], r.metrics["nodes"], r.metrics["gpus_per_node"]) for r in records} == {
        ("torchrun", 2, 1)}
    assert (folder / "trainperf-out" / f"{command}.csv").exists()
    finished = [line for line in proc.stdout.splitlines() if line.startswith(f"{command} ")]
    assert len(finished) == cases and finished[-1].startswith(f"{command} {cases}/{cases} ")
    assert all(line.endswith(": ok") for line in finished), finished  # a line per case as rank 0 stores it
    (other,) = [f for _, f in ran if f != folder]
    assert not (other / "trainperf.db").exists() and not (other / "trainperf-out" / f"{command}.csv").exists()
    assert list((other / "trainperf-out" / "logs").glob(f"{command}-rank1.log"))


def test_comm_tells_the_links_within_a_node_from_those_between_nodes(tmp_path):
    """Two one-rank nodes: the collective of one rank of each node spans them (`cross`); a node's own
    ranks are one here, so `node` is a row saying so."""
    ran = two_agents("comm", tmp_path, "--scope", "all,node,cross", "--bytes", "64K")
    assert all(proc.returncode == 0 for proc, _ in ran), [p.stdout[-2000:] for p, _ in ran]
    (folder,) = [f for p, f in ran if "trainperf comm" in p.stdout]
    rows = {r.spec["scope"]: r for r in Store(folder / "trainperf.db").records()}
    assert rows["all"].status == rows["cross"].status == "ok"
    assert rows["cross"].metrics["group_size"] == 2 and rows["cross"].metrics["busbw_gbps"] > 0
    assert rows["node"].status == "unsupported" and "spans one rank here (2 node(s) of 1 rank(s))" in rows[
        "node"].reason


def test_slurm_s_variables_name_the_rank_and_the_placement(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_NNODES", "2")
    assert existing_launch() is None  # no MASTER_ADDR: not a launch trainperf can join
    monkeypatch.setenv("MASTER_ADDR", "node-a")
    assert existing_launch() == (5, 8, 1)
    assert placement(8) == {"launcher": "slurm", "nodes": 2, "gpus_per_node": 4}


def test_trainperf_s_own_ranks_are_one_node(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert placement(4) == {"launcher": "trainperf", "nodes": 1, "gpus_per_node": 4}
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert placement(4) == {"launcher": "env", "nodes": 2, "gpus_per_node": 2}


def test_a_rank_killed_under_torchrun_with_a_restart_is_its_case_s_row_and_the_next_case_runs(tmp_path):
    """torchrun --max-restarts 1: rank 1 is SIGKILLed in the first case; the restarted group stores
    that case as its row (once), does not measure it again, and measures the next one."""
    env = launch_env(TRAINPERF_FAULT="kill:1:0:2")
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "--max-restarts", "1", "--monitor-interval", "0.1", "-m", "trainperf", "comm",
            "--dist-backend", "gloo", "--world-size", "2", "--timeout", "20", *TINY["comm"]]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    records = Store(tmp_path / "trainperf.db").records()
    by_size = {}
    for r in records:
        by_size.setdefault(r.spec["bytes"], []).append(r)
    first, second = (by_size[b] for b in sorted(by_size))
    assert len(first) == 1 and len(second) == 1  # each case once
    assert first[0].status == "error" and second[0].status == "ok", first[0].reason
    assert first[0].run_id == second[0].run_id and first[0].metrics["launcher"] == "torchrun"
    assert "trainperf comm" in proc.stdout and "ERROR" in proc.stdout  # the failed case's row is shown
