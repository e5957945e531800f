"""The autotuning disk cache: a choice made once is reused by a new process; a damaged, stale or
switched-off cache never fails a launch. A stand-in autotuner records what happens."""

import json

import pytest
import torch

pytest.importorskip("triton")
from trainperf.kernels import tuning  # noqa: E402


class FakeJit:
    def __init__(self, source: str, launched: list):
        self.__name__, self.cache_key, self.launched = "_k", source, launched

    def __getitem__(self, grid):
        return lambda *args, **kw: self.launched.append(("direct", kw["BLOCK"]))


class FakeAutotuner:
    """Candidates BLOCK=16/32/64; 'timing' picks `best`."""

    def __init__(self, best: int = 32, source: str = "src-v1"):
        self.launched, self.warmed = [], []
        self.fn = FakeJit(source, self.launched)
        self.configs = [_Config(b) for b in (16, 32, 64)]
        self.best = best

    def warmup(self, *args, grid, **kw):
        self.warmed.append(len(self.configs))

    def __getitem__(self, grid):
        def tune(*args, **kw):
            self.best_config = next(c for c in self.configs if c.kwargs["BLOCK"] == self.best)
            self.launched.append(("tuned", self.best))
        return tune


class _Config:
    def __init__(self, block: int):
        self.kwargs = {"BLOCK": block}

    def all_kwargs(self):
        return dict(self.kwargs)

    def __str__(self):
        return f"BLOCK: {self.kwargs['BLOCK']}"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRAINPERF_AUTOTUNE_CACHE", raising=False)
    monkeypatch.setattr(tuning, "interpreting", lambda: False)
    monkeypatch.setattr(tuning, "_CHOSEN", {})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    return tmp_path / "autotune"


def launch(kernel, key=(1024, "torch.bfloat16")):
    tuning.tuned_launch(kernel, lambda meta: (1,), key, (torch.zeros(4),), {"N": 1024})


def new_process(monkeypatch):
    monkeypatch.setattr(tuning, "_CHOSEN", {})


def test_a_new_process_launches_the_kept_choice_without_tuning(cache, monkeypatch):
    first = FakeAutotuner(best=64)
    launch(first)
    launch(first)
    assert first.launched == [("tuned", 64), ("direct", 64)]
    assert first.warmed == [3]  # every candidate compiled up front, once
    new_process(monkeypatch)
    second = FakeAutotuner(best=16)  # would choose otherwise if it tuned again
    launch(second)
    assert second.launched == [("direct", 64)] and second.warmed == []
    launch(second, key=(2048, "torch.bfloat16"))  # another tuning key is tuned
    assert second.launched[-1] == ("tuned", 16)
    assert len(list(cache.iterdir())) == 1


@pytest.mark.parametrize("damage", [
    "{not json", '{"chosen": [1, 2]}', '{"chosen": {"[1024, \\"torch.bfloat16\\"]": 7}}', "", '["x"]'])
def test_a_damaged_cache_is_ignored_and_rewritten(cache, monkeypatch, damage):
    launch(FakeAutotuner(best=32))
    (path,) = cache.iterdir()
    path.write_text(damage)
    new_process(monkeypatch)
    kernel = FakeAutotuner(best=64)
    launch(kernel)
    assert kernel.launched == [("tuned", 64)]
    assert json.loads(path.read_text())["chosen"] == {'[1024, "torch.bfloat16"]': 2}


def test_a_changed_kernel_or_gpu_does_not_reuse_choices(cache, monkeypatch):
    launch(FakeAutotuner(best=64))
    new_process(monkeypatch)
    edited = FakeAutotuner(best=16, source="src-v2")
    launch(edited)
    assert edited.launched == [("tuned", 16)]
    new_process(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Other GPU")
    other = FakeAutotuner(best=32)
    launch(other)
    assert other.launched == [("tuned", 32)]
    assert len(list(cache.iterdir())) == 3


def test_the_cache_can_be_switched_off(cache, monkeypatch):
    monkeypatch.setenv("TRAINPERF_AUTOTUNE_CACHE", "0")
    launch(FakeAutotuner(best=64))
    new_process(monkeypatch)
    kernel = FakeAutotuner(best=32)
    launch(kernel)
    assert kernel.launched == [("tuned", 32)]
    assert not cache.exists()


def test_an_unwritable_cache_folder_costs_nothing_but_the_tuning(cache, monkeypatch):
    cache.parent.joinpath("autotune").write_text("a file where the folder should be")
    kernel = FakeAutotuner(best=64)
    launch(kernel)
    launch(kernel)
    assert kernel.launched == [("tuned", 64), ("direct", 64)]


def test_attention_candidates_by_dtype():
    import triton

    from trainperf.attention.flash_triton import _candidates_by_dtype

    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
               for m, n, w, s in [(64, 64, 4, 3), (64, 64, 8, 3), (32, 64, 8, 5), (32, 128, 8, 3)]]
    prune = _candidates_by_dtype({(64, 64, 4, 3), (32, 64, 8, 5)})["early_config_prune"]
    q32, q16 = torch.zeros(1, dtype=torch.float32), torch.zeros(1, dtype=torch.bfloat16)
    assert prune(configs, {"Q": q16}) == [configs[0], configs[2]]  # the listed winners
    assert prune(configs[1:2], {"Q": q16}) == configs[1:2]  # none listed: all
    assert prune(configs, {"Q": q32}) == [configs[1], configs[3]]  # small tiles, at most 3 stages
    assert prune(configs[:1], {"Q": q32}) == configs[:1]  # none small: the least work
