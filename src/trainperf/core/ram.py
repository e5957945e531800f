"""Will a case fit in this machine's memory? Checked before a CPU sweep starts, so that a context
or batch typed one digit too long is refused with the numbers, not ended by the kernel's OOM
killer. The estimates are rough upper bounds of what a training step holds at once (weights,
gradients, optimizer state, the activations autograd keeps, the logits); on a GPU an `oom` record
stays the answer."""

from __future__ import annotations

from trainperf.core.errors import SpecError

GIB = 2**30


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_fits(needed_bytes: float, what: str) -> None:
    """SpecError naming the estimate and the limit when `needed_bytes` exceeds the available RAM."""
    available = available_bytes()
    if available is not None and needed_bytes > available:
        raise SpecError(f"{what} needs about {needed_bytes / GIB:,.1f} GiB of memory on the CPU; "
                        f"{available / GIB:,.1f} GiB is available")


def lm_step_bytes(d_model: int, d_ff: int, layers: int, heads: int, vocab: int, batch: int,
                  seq: int) -> float:
    """`training_step_bytes` of a step of the GPT LM (tied-free embeddings and head, attention
    scores materialised: probabilities and their gradient)."""
    params = 2 * vocab * d_model + layers * (4 * d_model * d_model + 3 * d_model * d_ff)
    return training_step_bytes(params, batch * seq, 12 * d_model + 3 * d_ff, layers, vocab,
                               batch * heads * seq**2 * 2)


def training_step_bytes(params: float, tokens: float, per_token_per_layer: float, layers: int, vocab: int,
                        scores_per_layer: float = 0.0, element: int = 4) -> float:
    """Weights, gradients and two optimizer states per parameter; per layer the kept activations
    (`per_token_per_layer` values a token) and attention scores where they are materialised; the
    float32 logits, their softmax and gradient."""
    return (4 * params * element + layers * (tokens * per_token_per_layer * element + scores_per_layer * 4)
            + 3 * tokens * vocab * 4)
