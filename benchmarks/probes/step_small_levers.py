"""Two small byte savings of the fastest step, each timed alone on Llama-3.2-1B's shapes:

- SGD over the model's bf16 parameters: PyTorch's foreach kernels (the step's now) against its
  fused kernel (`fused=True`). Both read parameter and gradient and write the parameter: 7.4 GB,
  about 2.5 ms at 3 TB/s.
- The attention input's gradient, dq·Wq + dk·Wk + dv·Wv: three GEMMs and an add of their three
  outputs (what autograd does now) against one GEMM and two accumulating ones (`addmm_`, beta 1),
  which write the sum once instead of three outputs that are read again: 75 MB less per layer.
Alternating rounds, median of `do_bench` per round.
Usage: PYTHONPATH=src python3 benchmarks/probes/step_small_levers.py [tokens ...]
"""

from __future__ import annotations

import sys

import torch
import triton

from trainperf.models import hf_llama


def rounds(cases: dict, n: int = 5) -> None:
    times = {name: [] for name in cases}
    for _ in range(n):
        for name, fn in cases.items():
            times[name].append(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))
    base = None
    for name, ts in times.items():
        t = sorted(ts)[n // 2]
        base = base or t
        each = " ".join(f"{x:.4f}" for x in ts)
        print(f"  {name:34s} {t:.4f} ms  {base / t:.3f}x  rounds {each}", flush=True)


def sgd() -> None:
    cfg = hf_llama.load_config("llama-3.2-1b")
    model = hf_llama.build_model(cfg, torch.bfloat16, torch.device("cuda"))
    params = [p for p in model.parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    nbytes = sum(3 * p.numel() * p.element_size() for p in params)
    print(f"SGD over {sum(p.numel() for p in params) / 1e9:.3f}B bf16 parameters in {len(params)} tensors "
          f"({nbytes / 1e9:.1f} GB moved)", flush=True)
    opts = {"foreach (now)": torch.optim.SGD(params, lr=1e-6),
            "fused": torch.optim.SGD(params, lr=1e-6, fused=True)}
    rounds({name: opt.step for name, opt in opts.items()})


def input_grad(tokens: int, d: int = 2048, kv: int = 512) -> None:
    dq = torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16)
    dk, dv = (torch.randn(tokens, kv, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    wq = torch.randn(d, d, device="cuda", dtype=torch.bfloat16) * 0.02
    wk, wv = (torch.randn(kv, d, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(2))

    def separate() -> torch.Tensor:
        return dq @ wq + dk @ wk + dv @ wv

    def accumulated() -> torch.Tensor:
        out = dq @ wq
        out.addmm_(dk, wk)
        return out.addmm_(dv, wv)

    ref = (dq.double() @ wq.double() + dk.double() @ wk.double() + dv.double() @ wv.double())
    for name, fn in (("separate", separate), ("accumulated", accumulated)):
        err = ((fn().double() - ref).norm() / ref.norm()).item()
        print(f"  {name} rel err vs float64 {err:.1e}", flush=True)
    print(f"input gradient of q/k/v at {tokens} tokens:", flush=True)
    rounds({"3 GEMMs + add (now)": separate, "GEMM + 2 addmm_": accumulated})


def main(tokens: list[int]) -> None:
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    sgd()
    for t in tokens:
        input_grad(t)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [18432, 16384])
