"""The trainperf command line: one sub-command per workload, plus profiling and result commands."""

# Importing a module registers its commands; this order is the order of --help.
from trainperf.cli.common import app, console, err_console  # noqa: I001
from trainperf.cli import workloads, distributed, predict, profile, results, suites  # noqa: F401
from trainperf.cli.interrupts import keep_only, stop_at_second_interrupt
from trainperf.cli.usage import run_cli
from trainperf.core.sigint import quiet_forkserver, remember_sigint, take_sigterm_as_interrupt
from trainperf.distributed.launch import existing_launch

__all__ = ["app", "main", "run_cli"]


def main() -> None:
    """The `trainperf` program: the command line, stopped by a Ctrl-C even where a library swallowed
    it, and at once by a second one; library pools' workers never see it, and after it only
    trainperf prints. A SIGTERM stops it as a Ctrl-C does, except in a rank of a torchrun or Slurm
    launch: its launcher ends the ranks with SIGTERM, and a rank waiting in a collective, where
    Python's handler cannot run, must end at once."""
    import sys

    remember_sigint(on_first=lambda: keep_only(console, err_console))
    if existing_launch() is None:
        take_sigterm_as_interrupt()
    quiet_forkserver()
    stop_at_second_interrupt()
    code = run_cli(app, sys.argv[1:])
    ended_in_a_launch(code)
    sys.exit(code)


def ended_in_a_launch(code: int) -> None:
    """A rank of a torchrun or Slurm launch leaves without tearing its process group down: its
    records are stored, and gloo's teardown can abort a process that finished its work."""
    import os
    import sys

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
