"""Can attention leave bf16 on Hopper? cuDNN's float8 SDPA, forward and backward
(attention/cudnn_fp8.py), against its bf16 SDPA at one causal shape: which float8 graphs this
GPU's cuDNN builds, each one's error, and forward + backward milliseconds in alternating rounds.

Each variant names the types of O, of dO (and dP) and of dQ, dK, dV; Q, K and V are e4m3 in all.
`8-8-8` is cuDNN's own test (all e4m3), `8-5-5` Transformer Engine's hybrid (gradients e5m2), and
the `16-` ones write O, or O and the gradients, in bf16, as a bf16 step around the attention reads
them (cuDNN 9.19 builds those on Blackwell only). Float8 gradients take the scales of the amaxes a
first call reports, as delayed scaling carries them, and dP's scale comes from its bound, or with
`-delayed` from its first amax too. Where FlashAttention 4 is installed, its bf16 kernels are timed
beside them. The error of each output is ‖x - ref‖ / ‖ref‖ against cuDNN's bf16 graphs on the
unquantized inputs; beside it, dP's amax as a share of the bound. Each float8 step includes its
casts (as PyTorch ops, an upper bound on casts a step fuses into the kernels that produce Q, K, V
and dO); `casts` times them alone.
Usage: PYTHONPATH=src python3 benchmarks/probes/cudnn_fp8_attention.py [B H KV N D [rounds [variants]]]
(default 1 32 32 32768 128: the 8B's attention on one rank of the sharded step at 32,768 tokens;
variants comma-separated, default all).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable

import torch

from trainperf.attention import cudnn_fp8 as f8
from trainperf.attention.cudnn_fe import cudnn_sdpa_backward_op, cudnn_sdpa_op
from trainperf.core.timing import time_op

TYPES = {"8": f8.E4M3, "5": f8.E5M2, "16": torch.bfloat16}
VARIANTS = ("8-8-8", "8-5-5", "8-8-8-delayed", "8-5-5-delayed", "16-8-16", "8-8-16")


def variant_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, variant: str,
                 scale: float) -> tuple[Callable[[], tuple], Callable[[], dict[str, torch.Tensor]]]:
    """The variant's forward + backward, and its O, dQ, dK, dV in float32, descaled, with dP's
    amax over its bound."""
    o_type, do_type, grad_type = (TYPES[p] for p in variant.split("-")[:3])
    types = f8.Float8Types(o_type, do_type, grad_type)
    delayed = None

    def step() -> tuple:
        o, stats, descale_o = f8.float8_forward(q, k, v, True, scale, types)
        return o, descale_o, *f8.float8_backward(do, q, k, v, o, descale_o, stats, True, scale, types,
                                                 delayed)

    first = step()[-1]  # a first call's amaxes scale the gradients, and dP's too where delayed
    delayed = first if variant.endswith("-delayed") else torch.cat([first[:3], f8.dp_bound(do, v).reshape(1)])

    def outputs() -> dict[str, torch.Tensor]:
        o, descale_o, *grads, descales, amaxes = step()
        out = {"o": o.float() * descale_o}
        for i, (name, t) in enumerate(zip(("dq", "dk", "dv"), grads, strict=True)):
            out[name] = t.float() * descales[i]
        out["dp_share"] = amaxes[3] / f8.dp_bound(do, v)
        return out

    return step, outputs


def main(b: int = 1, h: int = 32, kv: int = 32, n: int = 32768, d: int = 128, rounds: int = 5,
         variants: str = ",".join(VARIANTS)) -> None:
    import cudnn

    device = torch.device("cuda")
    torch.manual_seed(0)
    q = torch.randn(b, n, h, d, device=device, dtype=torch.bfloat16).transpose(1, 2)
    k, v = (torch.randn(b, n, kv, d, device=device, dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
    do = (torch.randn(b, n, h, d, device=device, dtype=torch.bfloat16) * 1e-3).transpose(1, 2)
    scale = d ** -0.5
    print(f"B{b} H{h} KV{kv} N{n} d{d}, cuDNN {cudnn.backend_version()}, {torch.cuda.get_device_name()}")

    def bf16_step() -> tuple:
        o, stats = cudnn_sdpa_op(q, k, v, True, scale)
        return (o, *cudnn_sdpa_backward_op(do, q, k, v, o, stats, True, scale))

    def casts() -> tuple:
        return (*(f8.cast(t, f8.E4M3) for t in (q, k, v, q, k, v, do)), f8.dp_bound(do, v))

    steps: dict[str, Callable[[], object]] = {"bf16": bf16_step, "casts": casts}
    try:
        from trainperf.attention.fa4 import fa4_attention_backward_op, fa4_attention_op

        qt, kt, vt, dot = (t.transpose(1, 2) for t in (q, k, v, do))

        def fa4_step() -> tuple:
            o, lse = fa4_attention_op(qt, kt, vt, True, scale)
            return (o, *fa4_attention_backward_op(dot, qt, kt, vt, o, lse, True, scale))

        fa4_step()
        steps["fa4"] = fa4_step
    except Exception as exc:  # noqa: BLE001 - FA4 is only a yardstick here
        print(f"fa4: not timed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    ref = dict(zip(("o", "dq", "dk", "dv"), (t.float() for t in bf16_step()), strict=True))
    for variant in variants.split(","):
        try:
            step, outputs = variant_step(q, k, v, do, variant, scale)
            out = outputs()
        except Exception as exc:  # noqa: BLE001 - a graph this cuDNN does not build is the answer
            print(f"{variant}: not built: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}", flush=True)
            continue
        errors = ", ".join(f"{name} {((out[name] - r).norm() / r.norm()).item():.2e}"
                           for name, r in ref.items())
        print(f"{variant}: relative error {errors}; dP's amax {out['dp_share'].item():.3f} of its bound",
              flush=True)
        steps[variant] = step
    for step in steps.values():
        time_op(step, device, warmup=3, reps=3)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        for name in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
            times[name].append(statistics.median(time_op(steps[name], device, warmup=1, reps=5)))
    for name, ms in times.items():
        ratios = [x / t for x, t in zip(times["bf16"], ms, strict=True)]
        print(f"{name}: {statistics.median(ms):.2f} ms forward + backward, bf16 / this "
              f"{statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:7]), *sys.argv[7:8])
