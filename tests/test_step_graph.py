import pytest
import torch
from conftest import rel_err

from trainperf.core.runner import free_memory
from trainperf.workloads.llama_sdpa import (
    LlamaSpec,
    LlamaStep,
    choose_kv_mode,
    measure_llama,
    recipe_setup,
    setup_spec,
)
from trainperf.workloads.step_graph import GraphedIteration

pytestmark = pytest.mark.gpu


# `fast` as it runs here (2 layers): its step from input embeddings, captured whole
def _spec(**fields) -> LlamaSpec:
    setup = {**recipe_setup("fast", "cuda"), **fields}
    return setup_spec(setup, "FA4", batch=2, seq=256, model="llama-3.2-1b", layers=2, device="cuda")


@pytest.fixture(autouse=True)
def _fa4_here():
    from trainperf.attention.fa4 import fa4_runs

    if not fa4_runs(torch.device("cuda")):
        pytest.skip("needs FlashAttention 4 on a Hopper or newer GPU")


def _grads(step: LlamaStep) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in step.model.named_parameters() if p.grad is not None}


def test_a_replayed_iteration_gives_the_eager_loss_and_gradients_and_sees_new_inputs():
    spec = _spec(optimizer="none")  # the weights stay put
    step = LlamaStep(spec, torch.device("cuda"))
    choose_kv_mode(step, spec.sdpa_backend)  # the attention it asks for, and the layers compiled
    # detached: a loss kept with its autograd graph keeps that iteration's AccumulateGrad nodes,
    # made on the eager stream, and the capture's backward would then run them there
    eager_loss, eager_grads = step().detach().clone(), _grads(step)
    graphed = GraphedIteration(step)
    loss, grads = graphed().clone(), _grads(step)
    assert torch.equal(loss, eager_loss)  # the same kernels in the same order
    assert grads.keys() == eager_grads.keys() and grads
    for name, g in grads.items():
        assert rel_err(g, eager_grads[name]) < 1e-2, name
    step.inputs["inputs_embeds"].copy_(step.inputs["inputs_embeds"].roll(1, dims=1))  # a new batch, in place
    replayed = graphed().clone()
    assert not torch.equal(replayed, eager_loss)
    assert torch.equal(replayed, step().detach())


def _measured_alone(spec: LlamaSpec) -> dict:
    """measure_llama's metrics with nothing of earlier tests alive, as the runner frees between cases."""
    free_memory()
    return measure_llama(spec)


def test_a_graphed_case_reports_the_memory_its_iteration_needs():
    eager, graphed = (_measured_alone(_spec(warmup=3, iters=3, graph=g)) for g in ("off", "step"))
    assert graphed["loss"] == pytest.approx(eager["loss"], rel=1e-3)
    # replays allocate nothing: without the capture's peak the record would show only what stays
    # alive. The capture holds its working set in a pool of its own, beside the blocks the eager and
    # side-stream iterations left, so it reads somewhat more: 0.5 GB at this size on an H100, 0.1 to
    # 0.4 GB at the whole model's shapes (the peers suite)
    assert eager["peak_mem_gb"] * 0.95 <= graphed["peak_mem_gb"] <= eager["peak_mem_gb"] + 1.0
