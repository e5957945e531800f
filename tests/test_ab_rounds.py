"""alternating_rounds: variants made afresh and timed in turn, so that drift under the power cap
falls on every variant alike (the GPU parts faked here)."""

import pytest
import torch

from trainperf.core import ab_rounds


@pytest.fixture
def fake_gpu(monkeypatch):
    """CUDA's memory calls and the timed calls faked: variant B's calls take 0.9 of A's."""
    timed = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**30)

    def monitored(run, calls, device):
        name = run()
        timed.append((name, calls))
        return {"s": 0.2 if name == "A" else 0.18, "j": 140.0, "sm_clock_mhz": 1500, "power_w": 700.0}
    monkeypatch.setattr(ab_rounds, "monitored_calls", monitored)
    return timed


def test_variants_are_made_afresh_and_timed_in_alternating_rounds(fake_gpu):
    made, lines = [], []

    def maker(name):
        def make():
            made.append(name)
            return lambda: name
        return make

    results = ab_rounds.alternating_rounds({"A": maker("A"), "B": maker("B")}, 3, 10, torch.device("cuda"),
                                           say=lines.append)
    assert made == ["A", "B"] * 3
    assert fake_gpu == [("A", 10), ("B", 10)] * 3
    assert [len(results[n]) for n in "AB"] == [3, 3]
    assert results["B"][0]["peak_gib"] == pytest.approx(3.0) and len(lines) == 6
    summary = ab_rounds.summary(results, "A")
    assert "1.1111x over A" in summary[1] and "1.0000x over A" in summary[0]


def test_rounds_stop_at_the_deadline(fake_gpu):
    lines = []
    results = ab_rounds.alternating_rounds({"A": lambda: lambda: "A"}, 3, 10, torch.device("cuda"),
                                           deadline=0.0, say=lines.append)
    assert results == {"A": []} and lines == ["deadline reached"]
    assert ab_rounds.summary(results, "A") == []


def test_without_the_reference_the_summary_gives_no_ratio():
    """A probe that runs some of its variants at a shape has no reference there to divide by."""
    results = {"A": [], "B": [{"s": 0.18, "peak_gib": 3.0}, {"s": 0.19, "peak_gib": 3.5}]}
    (line,) = ab_rounds.summary(results, "A")
    assert "over" not in line and "nan" not in line
    assert "best 0.1800 s" in line and "peak 3.50 GiB" in line


def test_a_probe_starts_each_case_only_with_its_build_time_left_and_says_which_it_skips(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(ab_rounds.time, "time", lambda: now[0])
    said: list[str] = []
    started = []
    for case in ab_rounds.cases_in_time(["1x16384", "12x1024", "24x768"], 400.0, 250.0, say=said.append):
        started.append(case)
        now[0] += 60  # the first case's build and rounds took a minute
    assert started == ["1x16384"] and said == ["deadline: skipping 12x1024", "deadline: skipping 24x768"]


class _Step:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def test_graphs_in_rounds_times_each_graph_and_closes_every_step(fake_gpu):
    steps = {"A": _Step(), "B": _Step()}
    results = ab_rounds.graphs_in_rounds({n: (steps[n], lambda n=n: n) for n in "AB"}, float("inf"),
                                         rounds=2, calls=5)
    assert fake_gpu == [("A", 5), ("B", 5)] * 2 and [len(results[n]) for n in "AB"] == [2, 2]
    assert all(s.closed for s in steps.values())


def test_graphs_in_rounds_closes_the_steps_when_a_round_fails(fake_gpu, monkeypatch):
    def failing(run, calls, device):
        raise torch.OutOfMemoryError("CUDA out of memory")
    monkeypatch.setattr(ab_rounds, "monitored_calls", failing)
    step = _Step()
    with pytest.raises(torch.OutOfMemoryError):
        ab_rounds.graphs_in_rounds({"A": (step, lambda: "A")}, float("inf"))
    assert step.closed
