"""A/B comparisons under the power cap: variants timed in alternating rounds in one process.

Under its power limit a GPU's clock drifts with its temperature and with what ran just before, by
more than the few percent that separate two variants of a step. Timing A then B compares two
machines' states; timing A, B, A, B, ... compares the variants, and the spread of each one's
rounds says how far the comparison is known. Each variant is made afresh in every round (a probe
captures a CUDA graph there), run once, then timed over back-to-back calls with the GPU monitor.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from trainperf.core.gpu_monitor import monitored_calls

Variant = Callable[[], Callable[[], object]]  # makes the callable to time (and sets up what it needs)


def alternating_rounds(variants: dict[str, Variant], rounds: int, calls: int, device: torch.device,
                       deadline: float = float("inf"), say: Callable[[str], None] = print
                       ) -> dict[str, list[dict[str, Any]]]:
    """Each variant's rounds: seconds and joules per call, clock, power and the peak memory (GiB)
    of making and running it. Stops at a round's variant that would start past `deadline`
    (epoch seconds)."""
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for rnd in range(rounds):
        for name, make in variants.items():
            if time.time() > deadline:
                say("deadline reached")
                return results
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            run = make()
            run()
            peak = torch.cuda.max_memory_allocated(device) / 2**30
            r = {**monitored_calls(run, calls, device), "peak_gib": peak}
            results[name].append(r)
            say(f"  round {rnd} {name:14s}: {r['s']:.4f} s/call, {r['j']:.1f} J/call, "
                f"{r.get('sm_clock_mhz')} MHz, {r.get('power_w')} W ({r.get('clock_reasons')}), "
                f"peak {peak:.2f} GiB")
            del run
    return results


def graphs_in_rounds(built: dict[str, tuple[Any, Callable[[], object]]], deadline: float,
                     rounds: int = 3, calls: int = 10) -> dict[str, list[dict[str, Any]]]:
    """`alternating_rounds` over a probe's captured iterations (name: (the step it was captured
    from, the graph)), printing each round; the steps are closed afterwards even when a round
    fails, so that a probe's next shape starts with their memory free."""
    try:
        return alternating_rounds({name: lambda g=graph: g for name, (_, graph) in built.items()},
                                  rounds, calls, torch.device("cuda"), deadline,
                                  say=lambda line: print(line, flush=True))
    finally:
        for step, _ in built.values():
            step.close()


def summary(results: dict[str, list[dict[str, Any]]], reference: str) -> list[str]:
    """One line per variant that ran: its best and mean seconds per call, the reference's best over
    its best (where the reference ran), and its peak memory."""
    ran = {name: rs for name, rs in results.items() if rs}
    base = min(r["s"] for r in ran[reference]) if reference in ran else None
    lines = []
    for name, rs in ran.items():
        best = min(r["s"] for r in rs)
        ratio = f"{base / best:.4f}x over {reference}, " if base is not None else ""
        lines.append(f"{name:14s}: best {best:.4f} s, mean {statistics.fmean(r['s'] for r in rs):.4f} s, "
                     f"{ratio}peak {max(r['peak_gib'] for r in rs):.2f} GiB")
    return lines


def cases_in_time(cases: Iterable[str], deadline: float, build_s: float,
                  say: Callable[[str], None] = lambda line: print(line, flush=True)) -> Iterator[str]:
    """Each of a probe's `cases` that starts with `build_s` seconds (what building its steps takes)
    left before `deadline` (epoch seconds); says which it skips, so the output shows what a device
    call's time limit left out."""
    for case in cases:
        if time.time() < deadline - build_s:
            yield case
        else:
            say(f"deadline: skipping {case}")
