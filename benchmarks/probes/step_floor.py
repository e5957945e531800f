"""Probe: how fast could any Llama-3.2-1B step built from the fastest step's matrix products and
attention be, under the power cap? usage: PYTHONPATH=src python3 benchmarks/probes/step_floor.py
DEADLINE_EPOCH SHAPE[:VARIANT,...]...

Per shape (e.g. 12x1024), in three alternating rounds of 10 calls, the variants named (by default
`compile`, `fast`, floor, floor+loss and floor+loss+sgd). A recipe's name times its step as the
suites run it: captured as a CUDA graph where the recipe replays one (`fast`, `fp8-trainperf`),
else uncaptured (`compile`). The floor is only the step's matrix products (each decoder layer's
projections, its MLP's gate and up as one GEMM against the stacked weights and its down
projection, forward, input and weight gradients, on the GEMMs `fast` takes; the LM head's three
products per logits block) and FlashAttention 4's forward and backward, captured as one CUDA graph,
with no norm, RoPE, SwiGLU, residual, loss or optimizer. `+loss` adds the chunked loss's
cross-entropy kernel on each logits block, `+sgd` the SGD update of every parameter. `+f8fwd`,
`+f8dgrad` and `+f8wgrad` run the decoder's forward, input-gradient or weight-gradient products
in float8 (torch._scaled_mm, e4m3 weights and activations, e5m2 gradients, fast accumulation in
the forward only, as torchao's float8 training does), on operands cast ahead: the casts cost
nothing, as if each producer wrote its float8 copies. Each variant's lead over the first bounds
what any step made of these kernels can reach: no step with more work is faster than its floor.
"""

import sys
import time

import torch

from trainperf.attention.fa4 import fa4_attention_backward_op, fa4_attention_op
from trainperf.core.ab_rounds import alternating_rounds, cases_in_time, summary
from trainperf.kernels.chunked_loss import chunk_rows, loss_and_grads
from trainperf.kernels.quack_gemm import mm_into, tuned_mm
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

D, FF, HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB = 2048, 8192, 32, 8, 64, 16, 128_256
KV = KV_HEADS * HEAD_DIM
SHAPES = {"q": (D, D), "k": (KV, D), "v": (KV, D), "o": (D, D), "gate_up": (2 * FF, D), "down": (D, FF)}
BACKWARD_ORDER = ("down", "gate_up", "o", "q", "k", "v")  # each layer's weight gradients, as made
DEFAULT = ("compile", "fast", "floor", "floor+loss", "floor+loss+sgd")
FLAGS = ("loss", "sgd", "f8fwd", "f8dgrad", "f8wgrad")
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _rand(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Values of a trained-scale spread (what a GEMM's power draw sees: not zeros); float8
    operands at unit spread, as their scales would make them."""
    x = torch.randn(*shape, device="cuda")
    return (x * 0.02).to(dtype) if dtype == torch.bfloat16 else x.to(dtype)


class Floor:
    """The step's matrix products and attention alone; the activations they would read between
    them are random, since no elementwise work runs."""

    def __init__(self, batch: int, seq: int, flags: set[str]) -> None:
        self.batch, self.seq, self.flags, tokens = batch, seq, flags, batch * seq
        self.weights = [{n: _rand(*s) for n, s in SHAPES.items()} for _ in range(LAYERS)]
        self.grads = [{n: torch.empty_like(w) for n, w in layer.items()} for layer in self.weights]
        self.head = _rand(VOCAB, D)  # tied: the embedding's gradient is left out (a gather's scatter)
        self.x, self.h, self.dgu = _rand(tokens, D), _rand(tokens, FF), _rand(tokens, 2 * FF)
        self.targets = torch.randint(0, VOCAB, (tokens,), device="cuda")
        if flags & {"f8fwd", "f8dgrad", "f8wgrad"}:
            self._float8_operands(tokens)

    def _float8_operands(self, tokens: int) -> None:
        """Each product's operands in the layout torch._scaled_mm takes (A row-major, B column-major)."""
        self.one = torch.ones((), device="cuda")
        self.w8 = [{n: w.to(E4M3) for n, w in layer.items()} for layer in self.weights]
        self.w8t = [{n: w.t().contiguous().to(E4M3) for n, w in layer.items()} for layer in self.weights]
        self.qkv8t = [torch.cat([w["q"], w["k"], w["v"]]).t().contiguous().to(E4M3) for w in self.weights]
        self.x8 = {k: _rand(tokens, k, dtype=E4M3) for k in (D, FF)}
        self.x8t = {k: _rand(k, tokens, dtype=E4M3) for k in (D, FF)}
        self.dy8 = {n: _rand(tokens, n, dtype=E5M2) for n in (D, KV, 2 * FF, D + 2 * KV)}
        self.dy8t = {n: _rand(n, tokens, dtype=E5M2) for n in (D, KV, 2 * FF)}

    def _f8(self, a: torch.Tensor, b: torch.Tensor, fast_accum: bool) -> torch.Tensor:
        return torch._scaled_mm(a, b, scale_a=self.one, scale_b=self.one, out_dtype=torch.bfloat16,
                                use_fast_accum=fast_accum)

    def _forward(self, i: int, name: str, x: torch.Tensor) -> torch.Tensor:
        if "f8fwd" in self.flags:
            return self._f8(self.x8[x.shape[1]], self.w8[i][name].t(), fast_accum=True)
        return tuned_mm(x, self.weights[i][name].t())

    def _input_grad(self, i: int, name: str, dy: torch.Tensor) -> torch.Tensor:
        if "f8dgrad" in self.flags:
            return self._f8(self.dy8[dy.shape[1]], self.w8t[i][name].t(), fast_accum=False)
        return tuned_mm(dy, self.weights[i][name])

    def _weight_grad(self, i: int, name: str, dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if "f8wgrad" in self.flags:
            return self._f8(self.dy8t[dy.shape[1]], self.x8t[x.shape[1]].t(), fast_accum=False)
        mm_into(dy.t(), x, self.grads[i][name])
        return self.grads[i][name]

    def _heads(self, t: torch.Tensor, heads: int) -> torch.Tensor:
        return t.view(self.batch, self.seq, heads, HEAD_DIM)

    def __call__(self) -> torch.Tensor:
        saved, x = [], self.x
        for i in range(LAYERS):
            q, k, v = (self._forward(i, n, x) for n in ("q", "k", "v"))
            o, lse = fa4_attention_op(self._heads(q, HEADS), self._heads(k, KV_HEADS),
                                      self._heads(v, KV_HEADS), True, HEAD_DIM ** -0.5)
            y = self._forward(i, "o", o.view(-1, D))
            self._forward(i, "gate_up", y)
            saved.append((x, q, k, v, o, lse, y))
            x = self._forward(i, "down", self.h)
        if "loss" in self.flags:
            rows = chunk_rows(VOCAB, x.dtype)
            _, dx, head_grad = loss_and_grads(x, self.head, self.targets, rows, fused=True, tuned=True)
        else:
            dx, head_grad = self._head_products(x)
        grads = [head_grad]
        for i in reversed(range(LAYERS)):
            x, q, k, v, o, lse, y = saved[i]
            grads.append(self._weight_grad(i, "down", dx, self.h))
            self._input_grad(i, "down", dx)
            grads.append(self._weight_grad(i, "gate_up", self.dgu, y))
            dy = self._input_grad(i, "gate_up", self.dgu)
            grads.append(self._weight_grad(i, "o", dy, o.view(-1, D)))
            do = self._input_grad(i, "o", dy)
            dq, dk, dv = (d.reshape(dy.shape[0], -1) for d in fa4_attention_backward_op(
                self._heads(do, HEADS), self._heads(q, HEADS), self._heads(k, KV_HEADS),
                self._heads(v, KV_HEADS), o, lse, True, HEAD_DIM ** -0.5))
            dx = self._qkv_input_grad(i, dq, dk, dv)
            grads += [self._weight_grad(i, n, d, x) for n, d in (("q", dq), ("k", dk), ("v", dv))]
        if "sgd" in self.flags:
            params = [self.head, *(w[n] for w in reversed(self.weights) for n in BACKWARD_ORDER)]
            torch._foreach_add_(params, grads, alpha=-1e-6)
        return dx

    def _qkv_input_grad(self, i: int, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> torch.Tensor:
        """dx from q, k and v: three products summed in bf16 (the later two added in their
        epilogues), in float8 one product against the stacked weights (_scaled_mm adds nothing)."""
        if "f8dgrad" in self.flags:
            return self._f8(self.dy8[D + 2 * KV], self.qkv8t[i].t(), fast_accum=False)
        dx = tuned_mm(dq, self.weights[i]["q"])
        for name, d in (("k", dk), ("v", dv)):
            mm_into(d, self.weights[i][name], dx, accumulate=True)
        return dx

    def _head_products(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The LM head's forward, input- and weight-gradient products per logits block, as the
        chunked loss runs them, with the block itself standing for its gradient."""
        dx, head_grad, rows = torch.empty_like(x), torch.empty_like(self.head), chunk_rows(VOCAB, x.dtype)
        for i in range(0, x.shape[0], rows):
            h = x[i:i + rows]
            logits = tuned_mm(h, self.head.t())
            mm_into(logits, self.head, dx[i:i + rows])
            mm_into(logits.t(), h, head_grad, accumulate=i > 0)
        return dx, head_grad


def built(shape: str, variant: str) -> object:
    """What `alternating_rounds` times for `variant`: a maker of the callable (the floors and the
    recipes that replay a graph captured, other recipes' steps as they are)."""
    t0, (batch, seq) = time.time(), map(int, shape.split("x"))
    name, *flags = variant.split("+")
    if name == "floor":
        floor = Floor(batch, seq, set(flags))
        floor()
        print(f"{shape} {variant}: built in {time.time() - t0:.0f} s", flush=True)
        return lambda: GraphedIteration(floor)
    step = llama_sdpa.recipe_step(variant, batch, seq)
    print(f"{shape} {variant} ({', '.join(step.swaps)}): first loss {step().item():.5f}, "
          f"built in {time.time() - t0:.0f} s", flush=True)
    if "graph" in llama_sdpa.recipe_setup(variant, "cuda", seq=seq):
        return lambda: GraphedIteration(step)
    step.model.zero_grad(set_to_none=True)  # the steps waiting their turn hold their weights only
    return lambda: step


def known(variant: str) -> bool:
    name, *flags = variant.split("+")
    return (name == "floor" and set(flags) <= set(FLAGS)) or (name in llama_sdpa.RECIPES and not flags)


def main() -> None:
    deadline, cases = float(sys.argv[1]), sys.argv[2:]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for case in cases_in_time(cases, deadline, 300):
        shape, _, names = case.partition(":")
        variants = names.split(",") if names else list(DEFAULT)
        if bad := [v for v in variants if not known(v)]:
            sys.exit(f"unknown variants {bad}: a recipe, or floor then any of +{', +'.join(FLAGS)}")
        makers = {v: built(shape, v) for v in variants}
        results = alternating_rounds(makers, 3, 10, torch.device("cuda"), deadline,
                                     say=lambda line: print(line, flush=True))
        for line in summary(results, variants[0]):
            print(shape, line, flush=True)
        del makers, results


if __name__ == "__main__":
    main()
