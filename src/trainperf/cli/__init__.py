"""The trainperf command line: one sub-command per workload, plus profiling and result commands."""

# Importing a module registers its commands; this order is the order of --help.
from trainperf.cli.common import app  # noqa: I001
from trainperf.cli import workloads, distributed, profile, results, suites  # noqa: F401

__all__ = ["app"]
