"""trainperf's gradient syncs used as a user's training loop uses them (gloo, 2 ranks on loopback).

Every variant must give the parameters single-process training gives on the whole batch, however
the loop zeroes its gradients, whether it accumulates micro-batches, with a Parameter used twice
and one that gets no gradient in some steps; a misuse the sync cannot repair is an error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainperf.distributed.grad_sync import BucketedSync, FlatSync, GradSync, NaiveSync, OverlapSync
from trainperf.distributed.launch import LaunchError, launch
from trainperf.distributed.sharded_optim import ShardedOptimizer

STEPS = 4
BATCH = 8  # the global batch; each of the 2 ranks takes half
VARIANTS = ("naive", "flat", "overlap", "bucketed", "bucketed+zero1", "flat+zero1")
ZEROING = ("sync", "optimizer-none", "optimizer-zeros", "model")


class Net(nn.Module):
    """A Parameter used twice (`hidden`), one used only on even steps (`sometimes`)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.hidden, self.sometimes, self.out = (nn.Linear(8, 16), nn.Linear(16, 16),
                                                           nn.Linear(16, 16), nn.Linear(16, 4))

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        h = torch.tanh(self.hidden(torch.tanh(self.hidden(torch.tanh(self.inp(x))))))
        if step % 2 == 0:
            h = torch.tanh(self.sometimes(h))
        return self.out(h)


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 8, generator=g), torch.randn(BATCH, 4, generator=g)) for _ in range(STEPS)]


def loss_of(model: Net, x: torch.Tensor, y: torch.Tensor, step: int, parts: int) -> torch.Tensor:
    """The mean-squared error of one of `parts` micro-batches, scaled so the parts sum to the mean."""
    return ((model(x, step) - y) ** 2).mean() / parts


def fresh_model() -> Net:
    torch.manual_seed(0)
    return Net()


def optimizer(params) -> torch.optim.Optimizer:  # noqa: ANN001
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)  # momentum: a None gradient is not a zero one


def single_process(set_to_none: bool) -> list[torch.Tensor]:
    model = fresh_model()
    opt = optimizer(model.parameters())
    for step, (x, y) in enumerate(batches()):
        loss_of(model, x, y, step, 1).backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)
    return [p.detach().clone() for p in model.parameters()]


def make_sync(variant: str, model: nn.Module) -> tuple[GradSync, object]:
    kind, _, zero1 = variant.partition("+")
    sync = {"naive": NaiveSync, "flat": FlatSync, "overlap": OverlapSync}.get(kind)
    sync = sync(model) if sync else BucketedSync(model, bucket_mb=0.001)  # several buckets
    opt = ShardedOptimizer(model.parameters(), optimizer) if zero1 else optimizer(model.parameters())
    return sync, opt


def zero(how: str, sync: GradSync, opt, model: nn.Module) -> None:  # noqa: ANN001
    if how == "sync":
        sync.zero_grad(opt)
    elif how == "optimizer-none":
        opt.zero_grad()
    elif how == "optimizer-zeros":
        opt.zero_grad(set_to_none=False)
    else:
        model.zero_grad()


def train(rank: int, variant: str, how: str, parts: int) -> list[torch.Tensor]:
    model = fresh_model()
    sync, opt = make_sync(variant, model)
    half = BATCH // 2
    for step, (x, y) in enumerate(batches()):
        x, y = x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half]
        for xs, ys in zip(x.chunk(parts), y.chunk(parts), strict=True):
            loss_of(model, xs, ys, step, parts).backward()
        sync.finish()
        opt.step()
        zero(how, sync, opt, model)
    sync.close()
    return [p.detach().clone() for p in model.parameters()]


def _every_loop(rank: int, world: int, out: str) -> None:
    got = {(v, how, parts): train(rank, v, how, parts)
           for v in VARIANTS for how in ZEROING for parts in (1, 2)}
    torch.save(got, f"{out}.{rank}")


def test_every_variant_matches_single_process_training_whatever_the_loop_does(tmp_path):
    out = str(tmp_path / "params")
    launch(_every_loop, 2, "gloo", args=(out,))
    # zeroes left by set_to_none=False move a parameter no backward reached (momentum); None does not
    reference = {set_to_none: single_process(set_to_none) for set_to_none in (True, False)}
    wrong = []
    for rank in range(2):
        for (variant, how, parts), params in torch.load(f"{out}.{rank}").items():
            expected = reference[how != "optimizer-zeros"]
            diff = max((a - b).abs().max().item() for a, b in zip(params, expected, strict=True))
            if diff > 1e-5:
                wrong.append(f"rank {rank} {variant} zeroed by {how}, {parts} micro-batches: {diff:.2e}")
    assert not wrong, "\n".join(wrong)


def _replace_during_backward(rank: int, world: int, variant: str) -> None:
    model = fresh_model()
    sync, opt = make_sync(variant, model)
    # a hook of the user's, after the sync's: the mean in flight lands in the gradient it replaced
    model.out.weight.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", p.grad.clone()))
    x, y = batches()[0]
    loss_of(model, x[rank::2], y[rank::2], 0, 1).backward()


@pytest.mark.parametrize("variant", ["overlap", "bucketed"])
def test_a_gradient_replaced_while_averaged_is_an_error_naming_the_parameter(variant):
    with pytest.raises(LaunchError, match=r"out\.weight was replaced while it was being averaged"):
        launch(_replace_during_backward, 2, "gloo", args=(variant,))


def _no_sync_to_the_end(rank: int, world: int) -> None:
    model = fresh_model()
    sync, opt = make_sync("bucketed", model)
    x, y = batches()[0]
    with sync.no_sync():
        loss_of(model, x[rank::2], y[rank::2], 0, 1).backward()
    sync.finish()


def test_finish_after_only_unsynced_backwards_is_an_error_saying_what_to_do():
    with pytest.raises(LaunchError, match="no_sync"):
        launch(_no_sync_to_the_end, 2, "gloo")


def _accumulate_without_sync(rank: int, world: int, out: str) -> None:
    model = fresh_model()
    sync, opt = make_sync("bucketed", model)
    x, y = batches()[0]
    x, y = x[rank * 4:(rank + 1) * 4], y[rank * 4:(rank + 1) * 4]
    calls = []
    original = sync.mean
    sync.mean = lambda *a, **k: calls.append(1) or original(*a, **k)
    with sync.no_sync():
        loss_of(model, x[:2], y[:2], 0, 2).backward()
    loss_of(model, x[2:], y[2:], 0, 2).backward()
    sync.finish()
    opt.step()
    torch.save((len(calls), len(sync.buckets), [p.detach() for p in model.parameters()]), f"{out}.{rank}")


def test_no_sync_accumulates_locally_and_syncs_once(tmp_path):
    out = str(tmp_path / "acc")
    launch(_accumulate_without_sync, 2, "gloo", args=(out,))
    calls, buckets, params = torch.load(f"{out}.0")
    assert calls == buckets  # one all-reduce per bucket, for the synced backward alone
    model = fresh_model()
    opt = optimizer(model.parameters())
    x, y = batches()[0]
    loss_of(model, x, y, 0, 1).backward()
    opt.step()
    for a, b in zip(params, model.parameters(), strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)
