"""The trainperf command line: one sub-command per workload, plus profiling and result commands."""

# Importing a module registers its commands; this order is the order of --help.
from trainperf.cli.common import app  # noqa: I001
from trainperf.cli import workloads, distributed, profile, results, suites  # noqa: F401
from trainperf.cli.interrupts import stop_at_second_interrupt

__all__ = ["app", "main"]


def main() -> None:
    """The `trainperf` program: the command line, stopped at once by a second Ctrl-C."""
    stop_at_second_interrupt()
    app()
