"""A case's graph breaks as a note on its record.

At a graph break torch.compile runs the rest of the frame as Python and compiles what follows
apart, without a word: a compiled step falls apart into pieces with eager code between them, and
runs slower for a reason its timing alone does not show. Dynamo counts every break it meets,
keyed by reason; a case's are those counted while it ran.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


def _break_counts() -> Counter:
    """Dynamo's graph breaks so far, by reason (none before torch.compile's first use)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    return Counter(counters["graph_break"]) if counters is not None else Counter()


def _describe(breaks: Counter) -> str:
    """The note: how many breaks, and the first line of the most frequent reason."""
    reason, _ = breaks.most_common(1)[0]
    first = next((line.strip() for line in reason.splitlines() if line.strip()), "no reason given")
    kinds = f", {len(breaks)} kinds" if len(breaks) > 1 else ""
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
