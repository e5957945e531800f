"""`trainperf suite run NAME`: every part of a suite, each a command line run by the runner the CLI
hands in, into a dated results folder `<results>/<suite>/<gpu>-<date>/` with the environment,
each part's CSV and plots, what the run printed (console.txt), and report.md."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timezone
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import torch

from trainperf.core import env as envmod
from trainperf.core.errors import SpecError
from trainperf.core.spec import parse_list
from trainperf.suites.catalog import SUITES, Suite
from trainperf.suites.console_log import console_to

INTERRUPTED = 130  # the exit code of a command stopped with Ctrl-C


class SuiteError(SpecError):
    """A part of a suite did not run (bad input or a command that stopped)."""


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise SpecError(f"unknown suite {name!r}; valid choices: {', '.join(SUITES)}")
    return SUITES[name]


def chosen_parts(suite: Suite, names: str | None) -> tuple[str, ...]:
    """The parts `--part` names (all when None), checked against the suite's."""
    known = tuple(part.name for part in suite.parts)
    if names is None:
        return known
    return tuple(parse_list(names, str, f"--part of suite {suite.name}", known))


def gpu_slug(gpu_name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; no GPU -> 'cpu'."""
    if not gpu_name:
        return "cpu"
    words = gpu_name.lower().replace("nvidia", " ").split()
    return next((re.sub(r"[^a-z0-9]", "", w) for w in words if re.search(r"\d", w)), words[0])


def folder_name(suite: Suite, env: dict[str, Any], gpus: int, today: str) -> str:
    slug = gpu_slug(env.get("gpu_name"))
    if suite.multi_gpu and gpus > 1:
        slug += f"x{gpus}"
    return f"{slug}-{today}"


Invoke = Callable[[list[str]], int]  # runs one trainperf command line, returns its exit code


def run_suite(suite: Suite, results: Path, db: Path | None, invoke: Invoke, rerun: bool = False,
              quiet: bool = False, say=print, parts: tuple[str, ...] | None = None) -> Path:
    """Run the `parts` of `suite` (every part when None) on this machine through `invoke` (the
    command line's runner, which the CLI hands in), storing into `db` (by default the results
    folder's <suite>.db); the results folder it wrote, with what the run printed as console.txt."""
    on_gpu = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if on_gpu else 0
    env = envmod.capture(torch.device("cuda" if on_gpu else "cpu"))
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    folder = results / suite.name / folder_name(suite, env, gpus, today)
    folder.mkdir(parents=True, exist_ok=True)
    db = db or folder / f"{suite.name}.db"
    from trainperf.suites.page import write_report

    try:
        with console_to(folder / "console.txt"):
            _run_parts(suite, folder, db, invoke, env, on_gpu, gpus, today, rerun, quiet, say,
                       parts or chosen_parts(suite, None))
    except KeyboardInterrupt:  # the parts so far, the interrupted one's finished cases, as a report
        if (folder / "suite.json").exists():
            write_report(folder)
        raise
    write_report(folder)
    return folder


def _run_parts(suite: Suite, folder: Path, db: Path, invoke: Invoke, env: dict[str, Any], on_gpu: bool,
               gpus: int, today: str, rerun: bool, quiet: bool, say, chosen: tuple[str, ...]) -> None:
    (folder / "env.json").write_text(json.dumps(env, indent=1, sort_keys=True, default=str) + "\n")
    parts: list[dict[str, str]] = []
    only = "" if len(chosen) == len(suite.parts) else f" --part {','.join(chosen)}"
    meta = {"suite": suite.name, "about": suite.about, "caption": suite.caption,
            "command": f"trainperf suite run {suite.name}{only}",
            "date": today, "commit": env.get("git_commit"), "parts": parts}
    for part in suite.parts:
        argv = part.argv(on_gpu, gpus)
        line = "trainperf " + " ".join(argv)
        if part.name not in chosen:
            parts.append({"name": part.name, "command": line, "left_out": "not asked for (--part)"})
            continue
        if on_gpu and gpus < part.min_gpus:
            parts.append({"name": part.name, "command": line,
                          "left_out": f"needs {part.min_gpus} GPUs, this machine has {gpus}"})
            say(f"{suite.name}/{part.name}: left out (needs {part.min_gpus} GPUs, {gpus} here)")
            continue
        if part.needs and find_spec(part.needs) is None:
            parts.append({"name": part.name, "command": line, "left_out": f"needs the {part.needs} package"})
            say(f"{suite.name}/{part.name}: left out (needs the {part.needs} package)")
            continue
        if not (part.stored or rerun) and any((folder / part.name).glob("*.json")):  # resumed: profiled
            parts.append({"name": part.name, "command": line})
            say(f"{suite.name}/{part.name}: profiled in an earlier run (--rerun profiles again)")
            continue
        say(f"{suite.name}/{part.name}: {line}")
        flags = ["--out", str(folder / part.name)]
        if part.stored:
            flags += ["--db", str(db), *(["--rerun"] if rerun else []), *(["--quiet"] if quiet else [])]
        code = invoke([*argv, *flags])
        if code == INTERRUPTED:  # Ctrl-C inside a part: the suite stops the same way, its files kept
            parts.append({"name": part.name, "command": line,
                          "interrupted": "stopped by Ctrl-C: the cases it finished"})
            parts += [{"name": p.name, "command": "trainperf " + " ".join(p.argv(on_gpu, gpus)),
                       "left_out": "not reached: the suite was interrupted"}
                      for p in suite.parts[len(parts):]]
            (folder / "suite.json").write_text(json.dumps(meta, indent=1) + "\n")
            raise KeyboardInterrupt(f"suite {suite.name} stopped in part {part.name}")
        if code:
            raise SuiteError(f"suite {suite.name}, part {part.name}: `{line}` stopped with exit code {code}")
        parts.append({"name": part.name, "command": line})
    (folder / "suite.json").write_text(json.dumps(meta, indent=1) + "\n")
