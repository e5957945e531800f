"""Capture the environment a measurement ran in, so every record can be compared honestly."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from trainperf.version import __version__

# Environment keys that make two measurements not directly comparable when they differ.
COMPARABILITY_KEYS = ("gpu_name", "torch", "cuda", "cudnn", "driver", "device_count")

# The libraries whose kernels a case may run: a record names the versions it ran with.
KERNEL_PACKAGES = ("triton", "transformers", "liger-kernel", "torchao", "flash-attn-4", "quack-kernels",
                   "nvidia-cudnn-frontend", "nvidia-cutlass-dsl", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13",
                   "nvidia-nccl-cu12", "nvidia-nccl-cu13")


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The project's git commit (with '-dirty' when the tree has changes), or 'unknown'.

    TRAINPERF_GIT_COMMIT overrides it, for copies of the tree that travel without .git.
    """
    if os.environ.get("TRAINPERF_GIT_COMMIT"):
        return os.environ["TRAINPERF_GIT_COMMIT"]
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _nvml_state(device: torch.device) -> dict[str, Any]:
    """Driver, clocks and power from NVML; empty when NVML is unavailable."""
    try:
        import pynvml

        from trainperf.core.gpu_monitor import nvml_handle

        pynvml.nvmlInit()
        try:
            h = nvml_handle(pynvml, device)
            return {
                "driver": pynvml.nvmlSystemGetDriverVersion(),
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "power_limit_w": pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000,
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML missing or refusing is normal off-GPU
        return {}


def installed_versions(names: tuple[str, ...] = KERNEL_PACKAGES) -> dict[str, str]:
    """Version of each installed distribution of `names`; those not installed are left out."""
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def capture(device: torch.device) -> dict[str, Any]:
    """Everything about software and hardware that can change a measurement."""
    env: dict[str, Any] = {
        "trainperf": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "device": device.type,
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "argv": " ".join(["trainperf", *sys.argv[1:]]),  # no local paths in stored records
        "packages": installed_versions(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu_name=props.name, gpu_memory_gb=round(props.total_memory / 2**30, 1),
                   sm_count=props.multi_processor_count,
                   compute_capability=f"{props.major}.{props.minor}",
                   # which GPU it was: rows of one suite resumed on another machine must not be
                   # set against each other unsaid
                   gpu_uuid=str(getattr(props, "uuid", "")) or None)
        env.update(_nvml_state(device))
    else:
        env["gpu_name"] = None
    return env


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when present; 'cuda' without a GPU is a usage error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {name!r}: no CUDA GPU is visible; valid choices: auto, cpu")
    if name != "cpu" and not name.startswith("cuda"):
        raise ValueError(f"--device {name!r} is not valid; valid choices: auto, cpu, cuda, cuda:N")
    return torch.device(name)
