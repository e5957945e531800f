"""Can attention leave bf16 on Hopper? cuDNN's float8 SDPA, forward and backward, against its bf16
SDPA at one causal shape with grouped K/V heads: which float8 graphs this GPU's cuDNN builds, each
one's error, and forward + backward milliseconds in alternating rounds.

Each variant names the types of O, of dO and of dQ, dK, dV (Q, K and V are e4m3 in all): `8-8-8`
is cuDNN's own test (all e4m3), `8-5-5` Transformer Engine's hybrid (gradients e5m2), and the
`16-` variants write O, or O and the gradients, in bf16, as a bf16 step around the attention would
read them. `8-8-8-rep` is `8-8-8` with K and V repeated to every query head, for a cuDNN that
refuses grouped heads in float8. Q, K, V and dO are cast with the scale of their own amax, as a
step would cast them; P, O and dP with the scales of bounds known before the kernel runs (P is at
most 1, |O| at most V's amax, |dP| at most the longest row of dO times the longest of V: no state
carried between steps), and the float8 gradients with the amaxes a first call reports, as delayed
scaling carries them. The error of each output is ‖x - ref‖ / ‖ref‖ against cuDNN's bf16 graphs on
the unquantized inputs. Timed: the float8 graphs
alone, and with their casts as PyTorch ops (an upper bound on casts that a step fuses into the
kernels producing Q, K, V and dO).
Usage: PYTHONPATH=src python3 benchmarks/probes/cudnn_fp8_attention.py [B H KV N D [rounds]]
(default 1 32 8 32768 128: the 8B's attention on one rank of the sharded step at 32,768 tokens).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable

import torch

from trainperf.attention.cudnn_fe import cudnn_sdpa_backward_op, cudnn_sdpa_op
from trainperf.core.timing import time_op
from trainperf.kernels import cudnn_graphs as cg

E4M3, E5M2, BF16 = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16
TYPES = {"8": E4M3, "5": E5M2, "16": BF16}
VARIANTS = ("8-8-8", "8-5-5", "16-8-16", "16-5-16", "16-8-8", "8-8-8-rep")
FORWARD_OUT = ("o", "stats", "amax_s", "amax_o")
BACKWARD_OUT = ("dq", "dk", "dv", "amax_dq", "amax_dk", "amax_dv", "amax_dp")
SCALARS = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s", "descale_dp",
           "scale_s", "scale_o", "scale_dq", "scale_dk", "scale_dv", "scale_dp")
# the backward's scale arguments, by the buffers they take
BACKWARD_SCALARS = {"descale_q": "descale_q", "descale_k": "descale_k", "descale_v": "descale_v",
                    "descale_o": "descale_o", "descale_dO": "descale_do", "descale_s": "descale_s",
                    "descale_dP": "descale_dp", "scale_s": "scale_s", "scale_dQ": "scale_dq",
                    "scale_dK": "scale_dk", "scale_dV": "scale_dv", "scale_dP": "scale_dp"}
UID = {name: i for i, name in enumerate(("q", "k", "v", "do", *FORWARD_OUT, *BACKWARD_OUT, *SCALARS), 1)}


def cudnn_type(dtype: torch.dtype):  # noqa: ANN201
    import cudnn

    return {E4M3: cudnn.data_type.FP8_E4M3, E5M2: cudnn.data_type.FP8_E5M2,
            BF16: cudnn.data_type.BFLOAT16, torch.float32: cudnn.data_type.FLOAT}[dtype]


def fmax(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).max if dtype.itemsize == 1 else 1.0


def cast(t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """t in `dtype` scaled by its own amax (same strides), and the descale that undoes it."""
    scale = fmax(dtype) / t.abs().amax().float().clamp(min=1e-12)
    return (t.float() * scale).to(dtype), (1 / scale).reshape(1, 1, 1, 1)


def declare(g, name: str, t: torch.Tensor):  # noqa: ANN001, ANN201
    return g.tensor(name=name, dim=list(t.shape), stride=list(t.stride()), uid=UID[name],
                    data_type=cudnn_type(t.dtype))


def finish(out, name: str, like: torch.Tensor) -> None:  # noqa: ANN001
    out.set_uid(UID[name]).set_output(True).set_dim(list(like.shape)).set_stride(list(like.stride()))
    out.set_data_type(cudnn_type(like.dtype))


def build(declare_graph: Callable) -> tuple:  # noqa: ANN001
    """A finalised graph (plans from heuristics) and its workspace size."""
    import cudnn

    g = cudnn.pygraph(handle=cg.handle(torch.device("cuda")), io_data_type=cudnn.data_type.FP8_E4M3,
                      intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    declare_graph(g)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, g.get_workspace_size()


class Float8Attention:
    """One variant's forward and backward graphs over fixed buffers."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, variant: str,
                 attn_scale: float) -> None:
        o_type, do_type, grad_type = (TYPES[p] for p in variant.split("-")[:3])
        self.kv_heads = k.shape[1]
        if variant.endswith("-rep"):
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        self.inputs = {"q": q, "k": k, "v": v, "do": do}
        self.types = {"q": E4M3, "k": E4M3, "v": E4M3, "do": do_type}
        self.buf = {name: cast(t, self.types[name])[0] for name, t in self.inputs.items()}
        b, h, n, d = q.shape
        self.buf["o"] = torch.empty(b, n, h, d, dtype=o_type, device=q.device).transpose(1, 2)
        self.buf["stats"] = torch.empty(b, h, n, 1, dtype=torch.float32, device=q.device)
        for name, like in (("dq", self.buf["q"]), ("dk", self.buf["k"]), ("dv", self.buf["v"])):
            self.buf[name] = torch.empty_strided(like.shape, like.stride(), dtype=grad_type, device=q.device)
        for name in (*SCALARS, "amax_s", "amax_o", "amax_dq", "amax_dk", "amax_dv", "amax_dp"):
            self.buf[name] = torch.ones(1, 1, 1, 1, dtype=torch.float32, device=q.device)
        self.buf["scale_s"].fill_(fmax(E4M3))
        self.buf["descale_s"].fill_(1 / fmax(E4M3))
        self.forward_graph = build(lambda g: self._forward(g, attn_scale))
        self.backward_graph = build(lambda g: self._backward(g, attn_scale))
        self.o_type, self.dp_type = o_type, do_type
        self.cast_inputs()
        self.run()  # the gradients' amaxes, for their scales where they are float8
        for name in ("dq", "dk", "dv"):
            if grad_type.itemsize == 1:
                self.buf[f"scale_{name}"].copy_(fmax(grad_type) / self.buf[f"amax_{name}"].clamp(min=1e-12))

    def _forward(self, g, attn_scale: float) -> None:  # noqa: ANN001
        q, k, v = (declare(g, name, self.buf[name]) for name in ("q", "k", "v"))
        scalars = {name: declare(g, name, self.buf[name]) for name in
                   ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")}
        outs = g.sdpa_fp8(q=q, k=k, v=v, **scalars, generate_stats=True, attn_scale=attn_scale,
                          use_causal_mask=True, name="fp8_fwd")
        for name, out in zip(FORWARD_OUT, outs, strict=True):
            finish(out, name, self.buf[name])

    def _backward(self, g, attn_scale: float) -> None:  # noqa: ANN001
        tensors = {name: declare(g, name, self.buf[name]) for name in ("q", "k", "v", "o", "stats")}
        tensors["dO"] = declare(g, "do", self.buf["do"])
        scalars = {arg: declare(g, name, self.buf[name]) for arg, name in BACKWARD_SCALARS.items()}
        outs = g.sdpa_fp8_backward(**tensors, **scalars, attn_scale=attn_scale, use_causal_mask=True,
                                   name="fp8_bwd")
        for name, out in zip(BACKWARD_OUT, outs, strict=True):
            finish(out, name, self.buf[name])

    def cast_inputs(self) -> None:
        """Q, K, V and dO cast with their own amax's scales; O's and dP's scales from bounds the
        inputs give, so that no scale waits for the tensor it scales: O's rows are convex
        combinations of V's, and each dP entry is a dot product of a row of dO and one of V."""
        for name, t in self.inputs.items():
            casted, descale = cast(t, self.types[name])
            self.buf[name].copy_(casted)
            self.buf[f"descale_{name}"].copy_(descale)
        bounds = {"o": self.inputs["v"].abs().amax().float(), "dp": self.dp_bound()}
        for name, dtype in (("o", self.o_type), ("dp", self.dp_type)):
            if dtype.itemsize == 1:
                scale = fmax(dtype) / bounds[name].clamp(min=1e-12)
                self.buf[f"scale_{name}"].copy_(scale)
                self.buf[f"descale_{name}"].copy_(1 / scale)

    def dp_bound(self) -> torch.Tensor:
        """The largest |dP| can be: the longest row of dO times the longest row of V."""
        rows = (t.float().norm(dim=-1).amax() for t in (self.inputs["do"], self.inputs["v"]))
        return next(rows) * next(rows)

    def run(self) -> None:
        device = self.buf["q"].device
        forward = {UID[n]: self.buf[n] for n in ("q", "k", "v", *FORWARD_OUT, "descale_q", "descale_k",
                                                  "descale_v", "descale_s", "scale_s", "scale_o")}
        cg.execute(self.forward_graph, forward, device)
        backward = {UID[n]: self.buf[n] for n in ("q", "k", "v", "o", "stats", "do", *BACKWARD_OUT,
                                                   *BACKWARD_SCALARS.values())}
        cg.execute(self.backward_graph, backward, device)

    def outputs(self) -> dict[str, torch.Tensor]:
        """O, dQ, dK and dV in float32, descaled (dK and dV summed back over repeated heads)."""
        out = {}
        for name in ("o", "dq", "dk", "dv"):
            t = self.buf[name].float()
            if self.buf[name].dtype.itemsize == 1:
                t = t / self.buf[f"scale_{name}"]
            out[name] = t
        if self.buf["dk"].shape[1] != self.kv_heads:
            for name in ("dk", "dv"):
                b, h, n, d = out[name].shape
                out[name] = out[name].reshape(b, self.kv_heads, h // self.kv_heads, n, d).sum(2)
        return out


def main(b: int = 1, h: int = 32, kv: int = 8, n: int = 32768, d: int = 128, rounds: int = 5) -> None:
    import cudnn

    device = torch.device("cuda")
    torch.manual_seed(0)
    q = torch.randn(b, n, h, d, device=device, dtype=BF16).transpose(1, 2)
    k, v = (torch.randn(b, n, kv, d, device=device, dtype=BF16).transpose(1, 2) for _ in range(2))
    do = (torch.randn(b, n, h, d, device=device, dtype=BF16) * 1e-3).transpose(1, 2)
    scale = d ** -0.5
    print(f"B{b} H{h} KV{kv} N{n} d{d}, cuDNN {cudnn.backend_version()}, {torch.cuda.get_device_name()}")

    def bf16_step() -> tuple:
        o, stats = cudnn_sdpa_op(q, k, v, True, scale)
        return (o, *cudnn_sdpa_backward_op(do, q, k, v, o, stats, True, scale))

    ref = dict(zip(("o", "dq", "dk", "dv"), (t.float() for t in bf16_step()), strict=True))
    steps: dict[str, Callable[[], object]] = {"bf16": bf16_step}
    for variant in VARIANTS:
        try:
            attention = Float8Attention(q, k, v, do, variant, scale)
        except Exception as exc:  # noqa: BLE001 - a graph this cuDNN does not build is the answer
            print(f"{variant}: not built: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            continue
        attention.run()
        errors = {name: ((t - ref[name]).norm() / ref[name].norm()).item()
                  for name, t in attention.outputs().items()}
        bound = (attention.buf["amax_dp"] / attention.dp_bound()).item()
        print(f"{variant}: relative error " + ", ".join(f"{name} {e:.2e}" for name, e in errors.items())
              + f"; dP's amax {bound:.3f} of its bound")
        steps[variant] = attention.run

        def with_casts(attention: Float8Attention = attention) -> None:
            attention.cast_inputs()
            attention.run()
        steps[f"{variant} +casts"] = with_casts
    for step in steps.values():
        time_op(step, device, warmup=3, reps=3)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        for name in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
            times[name].append(statistics.median(time_op(steps[name], device, warmup=1, reps=5)))
    base = statistics.median(times["bf16"])
    for name, ms in times.items():
        ratios = [x / t for x, t in zip(times["bf16"], ms, strict=True)]
        print(f"{name}: forward + backward {statistics.median(ms):.2f} ms, bf16 / this "
              f"{statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f}; "
              f"bf16 {base:.2f} ms)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:7]))
