"""Start `world_size` ranks on this host (or join an existing torchrun / Slurm launch).

Every rank runs `worker(rank, world_size, *args)` inside an initialised process group. A rank
that raises ends the whole run: torch.multiprocessing ends the other ranks, collective timeouts stop a
rank that would otherwise wait forever on a dead peer, and the first rank to fail is named.
A rank that dies only in process-group teardown, after every rank finished its work, is
reported as a warning: the work and its results are complete.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainperf.core.errors import SpecError, Unsupported

DEFAULT_TIMEOUT_S = 120
# What a fork server imports once, so that a rank forked from it starts without these seconds of
# imports (torch about 2 s, Dynamo and FSDP 1.5 s more on a CPU of the test machines)
FORK_SERVER_PRELOAD = ["torch", "torch._dynamo", "torch.distributed.fsdp", "transformers"]


class LaunchError(RuntimeError):
    """A rank failed; the message names the rank and its error."""


def existing_launch() -> tuple[int, int, int] | None:
    """(rank, world_size, local_rank) when started by torchrun or Slurm, else None."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "MASTER_ADDR" in env:
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
    return None


def rank_context() -> Any:
    """The multiprocessing context that starts this host's ranks: spawn where they may use a GPU (a
    CUDA context cannot be forked), else a fork server that has imported FORK_SERVER_PRELOAD, so
    that each group of CPU ranks (gloo) starts in a fraction of a second instead of seconds."""
    if torch.cuda.is_available():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(FORK_SERVER_PRELOAD)
    return ctx


def adopt_environment(environ: dict[str, str]) -> None:
    """Take the launching process's environment: a rank forked from a fork server starts with the
    server's, which is the launcher's when the server started."""
    os.environ.clear()
    os.environ.update(environ)


def placement(world_size: int) -> dict[str, Any]:
    """Who started the ranks and where they run, as every multi-GPU record names it: `launcher`
    (trainperf, torchrun, slurm, or env for RANK/WORLD_SIZE set by hand), `nodes` and
    `gpus_per_node` (ranks per node)."""
    env = os.environ
    if existing_launch() is None:
        return {"launcher": "trainperf", "nodes": 1, "gpus_per_node": world_size}
    if "TORCHELASTIC_RUN_ID" in env:
        per_node = int(env.get("LOCAL_WORLD_SIZE", world_size))
        nodes = int(env.get("GROUP_WORLD_SIZE", 0)) or max(world_size // per_node, 1)
        return {"launcher": "torchrun", "nodes": nodes, "gpus_per_node": per_node}
    if "SLURM_PROCID" in env and "RANK" not in env:
        nodes = int(env.get("SLURM_NNODES", 1))
        return {"launcher": "slurm", "nodes": nodes, "gpus_per_node": max(world_size // nodes, 1)}
    per_node = int(env.get("LOCAL_WORLD_SIZE", world_size))
    return {"launcher": "env", "nodes": max(world_size // per_node, 1), "gpus_per_node": per_node}


def launch_run_id() -> str | None:
    """The id of the torchrun or Slurm launch this process belongs to (None outside one): what its
    records and claims name, the same across a restart of its group."""
    return os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID")


def log_to(path: Path) -> None:
    """This process's stdout and stderr, Python's and the descriptors beneath, into `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_device(backend: str, rank: int) -> torch.device:
    """The device a rank works on: its own GPU (LOCAL_RANK under torchrun) under NCCL, else CPU."""
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def join_group(backend: str, rank: int, world_size: int, local_rank: int, timeout_s: float) -> torch.device:
    """Join the process group as `rank` on this process's own device: the GPU is chosen before the
    group exists and named to it, so NCCL never guesses (as torchtitan does)."""
    device = rank_device(backend, local_rank)
    bound = {"device_id": device} if device.type == "cuda" else {}
    timeout = timedelta(seconds=timeout_s)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is not None:  # torchrun's store outlives a restart: each attempt's keys apart, so a
        # restarted rank never reads a dead peer's address (gloo: connection refused)
        store, _, _ = next(dist.rendezvous("env://", rank, world_size, timeout=timeout))
        bound["store"] = dist.PrefixStore(f"trainperf/attempt{attempt}", store)
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timeout, **bound)
    return device


def init_rank(rank: int, world_size: int, backend: str, port: int, timeout_s: float) -> torch.device:
    """Join this host's process group (at `port` on loopback) as `rank`; its device."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return join_group(backend, rank, world_size, rank, timeout_s)


def _entry(local_rank: int, world_size: int, backend: str, port: int, timeout_s: float,
           worker: Callable[..., Any], args: tuple, error_dir: str, environ: dict[str, str]) -> None:
    from trainperf.core.library_noise import quiet_libraries

    adopt_environment(environ)
    quiet_libraries()  # a spawned rank starts without the CLI's filters
    try:
        init_rank(local_rank, world_size, backend, port, timeout_s)
        worker(local_rank, world_size, *args)
        Path(error_dir, f"done{local_rank}").touch()
        gc.collect()  # free DDP/FSDP objects (reference cycles) before their process group goes
        dist.barrier()  # leave together: tearing down while a peer still talks aborts gloo
    except BaseException as exc:
        # Remember when and how this rank failed: the first failure is the cause, later ones
        # (peers losing their connection to it) are consequences.
        line = traceback.format_exception_only(type(exc), exc)[-1].strip()
        refusal = isinstance(exc, (SpecError, Unsupported))
        Path(error_dir, f"rank{local_rank}").write_text(
            f"{time.time()}\n{type(exc).__name__ if refusal else ''}\n{exc if refusal else line}")
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


REFUSALS = {"SpecError": SpecError, "Unsupported": Unsupported}


def _first_failure(error_dir: str) -> str | None:
    """'rank R failed first: <its error>'; a case refused on a rank (bad input, unsupported here) is
    raised here as that refusal, as it would be in one process."""
    found = []
    for f in Path(error_dir).glob("rank*"):
        when, refusal, line = f.read_text().split("\n", 2)
        found.append((float(when), f.name[4:], refusal, line))
    if not found:
        return None
    when, rank, refusal, line = min(found)
    if refusal:
        raise REFUSALS[refusal](line)
    return f"rank {rank} failed first: {line}"


GLOO_RANKS_PER_CORE = 4  # gloo ranks on the CPU: a few per core still run (the tests use 8 on 2)


def world_size_problem(world_size: int, backend: str) -> str | None:
    """Why this host cannot start `world_size` ranks of `backend` itself (None if it can): NCCL
    needs a GPU per rank; gloo ranks are processes, a few per CPU core at most."""
    if backend == "nccl":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus == 0:
            return "--dist-backend nccl needs CUDA GPUs; none is visible (use --dist-backend gloo)"
        if world_size > gpus:
            return f"world size {world_size} needs {world_size} GPUs with nccl; {gpus} visible"
        return None
    limit = GLOO_RANKS_PER_CORE * (os.cpu_count() or 1)
    if world_size > limit:
        return (f"world size {world_size} is more than this host runs with gloo: at most {limit} "
                f"({GLOO_RANKS_PER_CORE} ranks per CPU core)")
    return None


def launch(worker: Callable[..., Any], world_size: int, backend: str, args: tuple = (),
           timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Run `worker` on `world_size` ranks; under torchrun/Slurm, run this process's rank only."""
    found = existing_launch()
    if found is not None:
        rank, world, local_rank = found
        if world != world_size:
            raise LaunchError(f"launched with WORLD_SIZE={world}, asked for world size {world_size}")
        if not dist.is_initialized():
            join_group(backend, rank, world, local_rank, timeout_s)
        worker(rank, world, *args)
        return
    problem = world_size_problem(world_size, backend)
    if problem:
        raise LaunchError(problem)
    with tempfile.TemporaryDirectory() as error_dir:
        try:
            mp.start_processes(_entry, nprocs=world_size, join=True,
                               args=(world_size, backend, free_port(), timeout_s, worker, args, error_dir,
                                     dict(os.environ)), start_method=rank_context().get_start_method())
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            first = _first_failure(error_dir)
            cause = first or str(exc).strip().splitlines()[-1]
            finished = len(list(Path(error_dir).glob("done*"))) == world_size
            if finished and isinstance(exc, mp.ProcessExitedException) and first is None:
                # Every rank had returned from its work (and its results were stored) when one
                # died in process-group teardown: say so, but do not call the run failed.
                warnings.warn(f"all ranks finished their work, then {cause} while shutting down",
                              RuntimeWarning, stacklevel=2)
                return
            raise LaunchError(f"the run was stopped: {cause}") from None
