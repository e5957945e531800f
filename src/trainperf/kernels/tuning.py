"""Autotuned launches that are quick to first use.

Triton's autotuner compiles and times each candidate config one after another the first time a
kernel meets a tuning key, in every new process. Here a first launch compiles all candidates at
once in threads (Triton's `AsyncCompileMode`, where this Triton has it), then lets the autotuner
time them; its choice is kept in memory (later calls launch straight with it, skipping the
autotuner's per-call dispatch) and on disk, so a new process launches straight away.

The disk cache is one JSON file per kernel under `$TRAINPERF_CACHE_DIR/autotune` (default
`~/.cache/trainperf/autotune`), named by a digest of the GPU's name, the Triton version, the
kernel's source (Triton's cache key, which covers the functions it calls) and its candidate
list; inside, the chosen candidate's index per tuning key. A file that cannot be read is ignored
and rewritten. `TRAINPERF_AUTOTUNE_CACHE=0` turns the disk cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import triton

from trainperf.kernels import interpreting

Grid = Callable[[dict], tuple[int, ...]]

_CHOSEN: dict[tuple, triton.Config] = {}  # (kernel name, tuning key): the config chosen


def cache_dir() -> Path | None:
    """Where chosen configs are kept, or None when the disk cache is off."""
    if os.environ.get("TRAINPERF_AUTOTUNE_CACHE", "1").lower() in ("0", "off", "false", "no"):
        return None
    root = os.environ.get("TRAINPERF_CACHE_DIR") or Path.home() / ".cache" / "trainperf"
    return Path(root) / "autotune"


def _cache_file(kernel: triton.runtime.Autotuner, args: Sequence[object]) -> Path | None:
    """The kernel's file of choices for the GPU its tensors are on; None where nothing is kept
    (cache off, the interpreter, a kernel with one candidate)."""
    folder = cache_dir()
    if folder is None or interpreting() or len(kernel.configs) < 2:
        return None
    device = next(a.device for a in args if isinstance(a, torch.Tensor))
    parts = [torch.cuda.get_device_name(device), triton.__version__, kernel.fn.cache_key,
             *map(str, kernel.configs)]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
    return folder / f"{kernel.fn.__name__}-{digest}.json"


def _read(path: Path) -> dict[str, int]:
    """The file's {tuning key: candidate index}; empty for a missing, damaged or foreign file."""
    try:
        entries = json.loads(path.read_text())["chosen"]
        return {k: v for k, v in entries.items() if isinstance(k, str) and isinstance(v, int)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _write(path: Path, key: str, index: int) -> None:
    """Add one choice; the file is replaced whole (a reader never sees half of it). A cache that
    cannot be written costs the next process its tuning, nothing else."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = {**_read(path), key: index}
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as tmp:
            json.dump({"chosen": entries}, tmp)
        os.replace(tmp.name, path)
    except OSError:
        pass


def bench(fn: Callable[[], object], quantiles: Sequence[float]) -> list[float]:
    """The autotuner's timing of one candidate: 10 ms of warm-up and 40 of timed calls (Triton's
    default is 25 and 100; measured on an H100, that was 1.2-1.6 s of a kernel's first call)."""
    return triton.testing.do_bench(fn, warmup=10, rep=40, quantiles=quantiles)


def _known(kernel: triton.runtime.Autotuner, key: tuple, args: Sequence[object]
           ) -> tuple[triton.Config | None, Path | None, str]:
    """The config chosen for `key` in this process or on disk (or None), the disk file, and the
    key as the file spells it. A choice made in this process returns at once: this runs on every
    launch, and short kernels are bound by host time."""
    config = _CHOSEN.get((kernel.fn.__name__, *key))
    if config is not None:
        return config, None, ""
    text = json.dumps(key, default=str)
    path = _cache_file(kernel, args)
    if path is not None:
        index = _read(path).get(text)
        if index is not None and 0 <= index < len(kernel.configs):
            config = kernel.configs[index]
    return config, path, text


Launch = tuple  # (kernel, grid, key, args, constexprs): tuned_launch's arguments


def compile_untuned(*launches: Launch) -> None:
    """Compile every candidate of the launches whose choice is not known yet, all at once in
    threads (Triton's `AsyncCompileMode`; its compiler runs in C++ and ptxas, so threads overlap):
    on an H100 this took a kernel's 8-11 bf16 candidates from 10-17 s to 3-5 s. Kernels launched
    one after the other (a backward's two) gain from being compiled together. Failures are left
    for the autotuner, which skips such candidates."""
    async_mode = getattr(triton, "AsyncCompileMode", None)
    todo = []
    for kernel, grid, key, args, constexprs in launches:
        config, path, _ = _known(kernel, key, args)
        if config is None and path is not None:  # untuned, with candidates to compile
            todo.append((kernel, grid, args, constexprs))
    if async_mode is None or not todo:
        return
    workers = min(sum(len(k.configs) for k, *_ in todo), os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool, async_mode(pool, ignore_errors=True):
        for kernel, grid, args, constexprs in todo:
            kernel.warmup(*args, grid=grid, **constexprs)


def tuned_launch(kernel: triton.runtime.Autotuner, grid: Grid, key: tuple, args: Sequence[object],
                 constexprs: dict) -> None:
    """Launch an autotuned kernel on `grid` (a function of the launch's meta-parameters). `key`
    names the tuning case as the autotuner's key does (sizes, dtypes, constexprs), in JSON-able
    values. The first launch of a key in this process reads the disk cache, or tunes; later ones
    launch straight with the choice (the hot path: one dictionary look-up)."""
    config, path, text = _known(kernel, key, args)
    if config is None:
        compile_untuned((kernel, grid, key, args, constexprs))
        kernel[grid](*args, **constexprs)
        config = kernel.best_config
        if path is not None:
            _write(path, text, kernel.configs.index(config))
        _CHOSEN[(kernel.fn.__name__, *key)] = config
        return
    if path is not None:  # read from disk: known in this process from now on
        _CHOSEN[(kernel.fn.__name__, *key)] = config
    kernel.fn[grid](*args, **constexprs, **config.all_kwargs())
