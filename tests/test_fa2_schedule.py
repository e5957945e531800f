"""The order in which triton-fa2's causal programs take their tiles (`_schedule`)."""

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
from trainperf.attention.flash_triton import _schedule  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter without a GPU


@triton.jit
def _record(Out, HEAVY_LAST: tl.constexpr, HEAD_GROUP: tl.constexpr):
    block, bh = _schedule(True, HEAVY_LAST, HEAD_GROUP)
    launch = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    tl.store(Out + 2 * launch, block)
    tl.store(Out + 2 * launch + 1, bh.to(tl.int32))


def launch_order(blocks: int, heads: int, group: int, heavy_last: bool) -> list[tuple[int, int]]:
    """(block, head) of each program of a (blocks, heads) grid, by launch order."""
    out = torch.full((blocks * heads, 2), -1, dtype=torch.int32, device=DEVICE)
    _record[(blocks, heads)](out, heavy_last, group)
    return [tuple(x) for x in out.tolist()]


@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("heavy_last", [True, False])
def test_causal_schedule_runs_each_tile_once_heaviest_first_by_head_group(group, heavy_last):
    """Every (block, head) exactly once; launch order goes through groups of `group` heads (the
    last one smaller when it does not divide 5), and inside a group takes the heaviest blocks
    (the last query blocks, the first key blocks) of all its heads before lighter ones."""
    blocks, heads = 4, 5
    order = launch_order(blocks, heads, group, heavy_last)
    assert sorted(order) == [(b, h) for b in range(blocks) for h in range(heads)]
    for first in range(0, heads, group):
        members = range(first, min(first + group, heads))
        part = order[first * blocks:(first + len(members)) * blocks]
        assert {h for _, h in part} == set(members)
        weight = [b if heavy_last else -b for b, _ in part]
        assert weight == sorted(weight, reverse=True)
