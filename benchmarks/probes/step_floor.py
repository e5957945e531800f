"""Probe: how fast could any Llama-3.2-1B step built from the fastest step's matrix products and
attention be, under the power cap? usage: PYTHONPATH=src python3 benchmarks/probes/step_floor.py
DEADLINE_EPOCH SHAPE...

Per shape (e.g. 12x1024), in three alternating rounds of 10 calls: the `compile` recipe as the
peers suite runs it (uncaptured), `fast` captured as a CUDA graph, and the floor: only the step's
matrix products (each decoder layer's projections, its MLP's gate and up as one GEMM against the
stacked weights and its down projection, forward, input and weight gradients, on the GEMMs `fast`
takes; the LM head's three products per logits block) and FlashAttention 4's forward and backward,
captured as one CUDA graph, with no norm, RoPE, SwiGLU, residual, loss or optimizer. `+loss` adds
the chunked loss's cross-entropy kernel on each logits block, `+sgd` the SGD update of every
parameter. Each variant's lead over `compile` bounds what any step made of these kernels can
reach: a lead the floor does not reach, no step with more work can.
"""

import sys
import time

import torch

from trainperf.attention.fa4 import fa4_attention_backward_op, fa4_attention_op
from trainperf.core.ab_rounds import alternating_rounds, summary
from trainperf.kernels.chunked_loss import chunk_rows, loss_and_grads
from trainperf.kernels.quack_gemm import mm_into
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

D, FF, HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB = 2048, 8192, 32, 8, 64, 16, 128_256
FLOORS = ("floor", "floor+loss", "floor+loss+sgd")


def _rand(*shape: int) -> torch.Tensor:
    """bf16 values of a trained-scale spread: what a GEMM's power draw sees (not zeros)."""
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.02


class Floor:
    """The step's matrix products and attention alone; the activations they would read between
    them are random, since no elementwise work runs."""

    def __init__(self, batch: int, seq: int, loss: bool, sgd: bool) -> None:
        self.batch, self.seq, self.loss, self.sgd, tokens = batch, seq, loss, sgd, batch * seq
        shapes = {"q": (D, D), "k": (KV_HEADS * HEAD_DIM, D), "v": (KV_HEADS * HEAD_DIM, D),
                  "o": (D, D), "gate_up": (2 * FF, D), "down": (D, FF)}
        self.weights = [{n: _rand(*s) for n, s in shapes.items()} for _ in range(LAYERS)]
        self.grads = [{n: torch.empty_like(w) for n, w in layer.items()} for layer in self.weights]
        self.head = _rand(VOCAB, D)  # tied: the embedding's gradient is left out (a gather's scatter)
        self.x, self.h, self.dgu = _rand(tokens, D), _rand(tokens, FF), _rand(tokens, 2 * FF)
        self.targets = torch.randint(0, VOCAB, (tokens,), device="cuda")
        self.params = [w for layer in self.weights for w in layer.values()]
        self.param_grads = [g for layer in self.grads for g in layer.values()]

    def _heads(self, t: torch.Tensor, heads: int) -> torch.Tensor:
        return t.view(self.batch, self.seq, heads, HEAD_DIM)

    def __call__(self) -> torch.Tensor:
        saved, x = [], self.x
        for w, g in zip(self.weights, self.grads, strict=True):  # forward: products and attention
            q, k, v = (_mm(x, w[n].t()) for n in ("q", "k", "v"))
            o, lse = fa4_attention_op(self._heads(q, HEADS), self._heads(k, KV_HEADS),
                                      self._heads(v, KV_HEADS), True, HEAD_DIM ** -0.5)
            y = _mm(o.view(-1, D), w["o"].t())
            _mm(y, w["gate_up"].t())
            saved.append((w, g, x, q, k, v, o, lse, y))
            x = _mm(self.h, w["down"].t())
        if self.loss:
            rows = chunk_rows(VOCAB, x.dtype)
            _, dx, head_grad = loss_and_grads(x, self.head, self.targets, rows, fused=True, tuned=True)
        else:
            dx, head_grad = self._head_products(x)
        for w, g, x, q, k, v, o, lse, y in reversed(saved):
            mm_into(dx.t(), self.h, g["down"])
            _mm(dx, w["down"])
            mm_into(self.dgu.t(), y, g["gate_up"])
            dy = _mm(self.dgu, w["gate_up"])
            mm_into(dy.t(), o.view(-1, D), g["o"])
            do = _mm(dy, w["o"])
            dq, dk, dv = (d.reshape(dy.shape[0], -1) for d in fa4_attention_backward_op(
                self._heads(do, HEADS), self._heads(q, HEADS), self._heads(k, KV_HEADS),
                self._heads(v, KV_HEADS), o, lse, True, HEAD_DIM ** -0.5))
            dx = _mm(dq, w["q"])
            for name, d in (("q", dq), ("k", dk), ("v", dv)):
                if name != "q":
                    mm_into(d, w[name], dx, accumulate=True)
                mm_into(d.t(), x, g[name])
        if self.sgd:
            torch._foreach_add_([*self.params, self.head], [*self.param_grads, head_grad], alpha=-1e-6)
        return dx

    def _head_products(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The LM head's forward, input- and weight-gradient products per logits block, as the
        chunked loss runs them, with the block itself standing for its gradient."""
        dx, head_grad, rows = torch.empty_like(x), torch.empty_like(self.head), chunk_rows(VOCAB, x.dtype)
        for i in range(0, x.shape[0], rows):
            h = x[i:i + rows]
            logits = _mm(h, self.head.t())
            mm_into(logits, self.head, dx[i:i + rows])
            mm_into(logits.t(), h, head_grad, accumulate=i > 0)
        return dx, head_grad


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b into a new tensor, on the GEMM `fast` takes for its shape."""
    out = a.new_empty(a.shape[0], b.shape[1])
    mm_into(a, b, out)
    return out


def built(shape: str, variant: str) -> object:
    """What `alternating_rounds` times for `variant`: a maker of the callable (captured floors and
    `fast`, the uncaptured `compile` step)."""
    t0, (batch, seq) = time.time(), map(int, shape.split("x"))
    if variant in FLOORS:
        floor = Floor(batch, seq, loss="+loss" in variant, sgd="+sgd" in variant)
        floor()
        print(f"{shape} {variant}: built in {time.time() - t0:.0f} s", flush=True)
        return lambda: GraphedIteration(floor)
    step = llama_sdpa.recipe_step(variant, batch, seq)
    print(f"{shape} {variant} ({', '.join(step.swaps)}): first loss {step().item():.5f}, "
          f"built in {time.time() - t0:.0f} s", flush=True)
    step.model.zero_grad(set_to_none=True)  # the steps waiting their turn hold their weights only
    return (lambda: GraphedIteration(step)) if variant == "fast" else (lambda: step)


def main() -> None:
    deadline, shapes = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for shape in shapes:
        if time.time() > deadline - 300:
            print("deadline: skipping", shape, flush=True)
            continue
        makers = {v: built(shape, v) for v in ("compile", "fast", *FLOORS)}
        results = alternating_rounds(makers, 3, 10, torch.device("cuda"), deadline,
                                     say=lambda line: print(line, flush=True))
        for line in summary(results, "compile"):
            print(shape, line, flush=True)
        del makers, results


if __name__ == "__main__":
    main()
