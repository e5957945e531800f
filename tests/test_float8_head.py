"""The LM head on float8 GEMMs (`--float8 trainperf-head`, kernels/float8_head.py): its loss and
gradients against float64, one scale for every chunk of the logits' gradient, and the recipe's
input checks. On the CPU the casts run in Triton's interpreter (tests/test_float8_mlp.py)."""

import json

import pytest
import torch
from conftest import rel_err

from trainperf.core.errors import SpecError, Unsupported
from trainperf.kernels.float8_head import float8_chunked_lm_loss, head_state
from trainperf.kernels.float8_linear import GRAD
from trainperf.models.hf_llama import PRESETS
from trainperf.workloads import llama_sdpa

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _task(n: int, d: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return (torch.randn(n, d, device=DEVICE, dtype=torch.float64),
            torch.randn(vocab, d, device=DEVICE, dtype=torch.float64) / d**0.5,
            torch.randint(0, vocab, (n,), device=DEVICE))


def _check_against_float64(n: int, d: int, vocab: int, chunk: int, bounds: tuple[float, float]) -> None:
    h, w, t = _task(n, d, vocab)
    h64, w64 = h.clone().requires_grad_(), w.clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(h64 @ w64.t(), t)
    ref.backward()
    state = head_state(w)
    for _ in range(3):  # calibrating, then with the scales of earlier iterations
        hb, wb = h.bfloat16().requires_grad_(), w.bfloat16().requires_grad_()
        loss = float8_chunked_lm_loss(hb, wb, t, state, chunk=chunk)
        (2 * loss).backward()  # the incoming gradient scales the stored ones
        assert loss.dtype == torch.float32 and abs(loss.item() - ref.item()) < bounds[0] * ref.item()
        assert hb.grad.dtype == wb.grad.dtype == torch.bfloat16
        assert rel_err(hb.grad, 2 * h64.grad) < bounds[1]
        assert rel_err(wb.grad, 2 * w64.grad) < bounds[1]
    assert all(state.calibrated)


@pytest.mark.skipif(DEVICE == "cuda", reason="the GPU form of this test is below")
def test_the_float8_head_follows_float64_within_the_interpreter_s_float8():
    _check_against_float64(96, 64, 160, 32, (0.01, 0.15))


@pytest.mark.gpu
def test_the_float8_head_follows_float64_within_float8_on_the_gpu():
    # e4m3 logits (3 bits of mantissa) and an e5m2 gradient (2 bits): a few percent per product
    _check_against_float64(4096, 512, 32000, 1024, (0.005, 0.08))


def test_every_chunk_of_the_logits_gradient_takes_one_scale():
    """The gradient's amax goes into its history once an iteration, whatever the chunks, so a
    second iteration scales every chunk alike: the gradients then match one chunk's."""
    h, w, t = _task(96, 64, 160)
    grads = []
    for chunk in (32, 96):
        state = head_state(w)
        for _ in range(2):
            hb, wb = h.bfloat16().requires_grad_(), w.bfloat16().requires_grad_()
            float8_chunked_lm_loss(hb, wb, t, state, chunk=chunk).backward()
        assert int((state.hist[GRAD] > 0).sum()) == 2  # two iterations, two amaxes
        grads.append((hb.grad, wb.grad))
    for chunked, whole in zip(*grads, strict=True):
        torch.testing.assert_close(chunked, whole, rtol=0.02, atol=1e-4)


def test_the_float8_head_takes_what_float8_gemms_take():
    h, w, t = _task(96, 64, 160)
    state = head_state(w)
    with pytest.raises(ValueError, match="multiple of 16, not 90"):
        float8_chunked_lm_loss(h[:90].bfloat16(), w.bfloat16(), t[:90], state)
    with pytest.raises(ValueError, match="multiple of 16 rows, not 24"):
        float8_chunked_lm_loss(h.bfloat16(), w.bfloat16(), t, state, chunk=24)


def test_the_recipe_needs_the_chunked_loss_and_a_vocabulary_float8_gemms_take(tmp_path):
    with pytest.raises(SpecError, match="takes --loss chunked"):
        llama_sdpa.validate(llama_sdpa.setup_spec({"float8": "trainperf-head"}, "MATH", batch=1, seq=16,
                                                  warmup=1, iters=1, model="tiny", device=DEVICE))
    spec = llama_sdpa.setup_spec({"loss": "chunked", "float8": "trainperf-head"}, "MATH", batch=1,
                                 seq=16, warmup=1, iters=1, model="tiny", device=DEVICE)
    with pytest.raises(Unsupported, match="multiple of 16, not 1000"):  # the tiny preset's vocabulary
        llama_sdpa.LlamaStep(spec, torch.device(DEVICE))
    cfg = json.loads(PRESETS["tiny"].read_text()) | {"vocab_size": 1024}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = llama_sdpa.setup_spec({"loss": "chunked", "float8": "trainperf-head"}, "MATH", batch=1,
                                 seq=16, warmup=1, iters=1, model=str(tmp_path / "config.json"),
                                 device=DEVICE)
    step = llama_sdpa.LlamaStep(spec, torch.device(DEVICE))
    try:
        loss = step()
    finally:
        step.close()
    assert abs(float(loss) - torch.log(torch.tensor(1024.0)).item()) < 0.5  # near uniform at first
