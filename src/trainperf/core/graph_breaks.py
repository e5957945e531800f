"""A case's graph breaks as a note on its record.

At a graph break torch.compile runs the rest of the frame as Python and compiles what follows
apart, without a word: a compiled step falls apart into pieces with eager code between them, and
runs slower for a reason its timing alone does not show. Dynamo counts every break it meets,
keyed by reason; a case's are those counted while it ran. A function trainperf keeps out of the
graph on purpose says why (outside_graph), and its note says so.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# Dynamo's explanation of a break at a torch.compiler.disable'd function, with the reason it was given
_KEPT_OUT = re.compile(r"function `<function (\S+) at [^`]*`.*\(reason: (.+)\)\s*$", re.MULTILINE)


def outside_graph(reason: str) -> Callable[[Callable], Callable]:
    """torch.compiler.disable with the reason a case's graph-break note then gives (torch 2.8 and
    later take one; before, the note names only Dynamo's reason)."""
    import torch

    try:
        return torch.compiler.disable(reason=reason)
    except TypeError:
        return torch.compiler.disable


def _break_counts() -> Counter:
    """Dynamo's graph breaks so far, by reason (none before torch.compile's first use)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    return Counter(counters["graph_break"]) if counters is not None else Counter()


def _describe(breaks: Counter) -> str:
    """The note: how many breaks, and the first line of the most frequent reason, or the function
    kept out of the graph on purpose and why."""
    reason, _ = breaks.most_common(1)[0]
    kinds = f", {len(breaks)} kinds" if len(breaks) > 1 else ""
    kept_out = _KEPT_OUT.search(reason)
    if kept_out and kept_out[2] != "None":
        most = f"{kinds}, the most frequent" if kinds else ""
        return (f"{sum(breaks.values())} graph break(s){most} where `{kept_out[1]}` is kept out of the "
                f"compiled graph on purpose: {kept_out[2]}")
    first = next((line.strip() for line in reason.splitlines() if line.strip()), "no reason given")
    return (f"{sum(breaks.values())} graph break(s) in compiled code{kinds} (\"{first[:120]}\"): parts ran "
            "as eager Python between compiled pieces; TORCH_LOGS=graph_breaks shows where")


@contextmanager
def graph_break_notes() -> Iterator[list[str]]:
    """Yield a list that holds, once the block ends, a note on the graph breaks Dynamo met inside it."""
    notes: list[str] = []
    before = _break_counts()
    try:
        yield notes
    finally:
        met = _break_counts() - before
        if met:
            notes.append(_describe(met))
