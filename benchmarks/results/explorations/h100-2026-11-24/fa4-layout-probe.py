"""Probe: the layouts FlashAttention 4's forward and backward receive inside `fast`'s step at
1 x 16384, and each timed alone with those layouts against contiguous copies.

usage (a Hopper GPU with flash-attn-4 and quack-kernels): PYTHONPATH=src python3 fa4-layout-probe.py
SWIGLU...  (quack, torch)
"""
import sys

import flash_attn.cute.interface as fi
import torch
from triton.testing import do_bench

from trainperf.workloads.llama_sdpa import LlamaStep, choose_kv_mode, recipe_forms, setup_spec

seen: dict[str, list] = {}
FWD, BWD = fi._flash_attn_fwd, fi._flash_attn_bwd


def desc(t: torch.Tensor) -> tuple:
    return tuple(t.shape), tuple(t.stride()), t.dtype


def recording_fwd(q, k, v, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN201
    seen.setdefault("fwd", [desc(t) for t in (q, k, v)])
    return FWD(q, k, v, *a, **kw)


def recording_bwd(q, k, v, o, do, lse, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN201
    seen.setdefault("bwd", [desc(t) for t in (q, k, v, o, do, lse)])
    return BWD(q, k, v, o, do, lse, *a, **kw)


def like(shape: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(shape, stride, dtype=dtype, device="cuda").normal_()


def layouts(swiglu: str) -> dict[str, list]:
    """One step of `fast` (with the MLP `swiglu`); what FA4 received."""
    seen.clear()
    spec = setup_spec({**recipe_forms("fast")[0], "swiglu": swiglu, "sdpa_backend": "FA4"}, "FA4",
                      batch=1, seq=16384, warmup=1, iters=1)
    step = LlamaStep(spec, torch.device("cuda"))
    choose_kv_mode(step, "FA4")
    torch.cuda.synchronize()
    step.close()
    return dict(seen)


def timings(found: dict[str, list]) -> tuple[float, float, float, float]:
    """Backward and forward milliseconds with the step's layouts, then with contiguous copies."""
    q, k, v, o, do, lse = (like(*d) for d in found["bwd"])
    lse = lse.abs_()
    scale = q.shape[-1] ** -0.5
    bwd = do_bench(lambda: BWD(q, k, v, o, do, lse, scale, True), warmup=5, rep=50)
    c = [t.contiguous() for t in (q, k, v, o, do)]
    bwd_c = do_bench(lambda: BWD(*c, lse, scale, True), warmup=5, rep=50)
    f = [like(*d) for d in found["fwd"]]
    fwd = do_bench(lambda: FWD(*f, softmax_scale=scale, causal=True, return_lse=True), warmup=5, rep=50)
    fc = [t.contiguous() for t in f]
    fwd_c = do_bench(lambda: FWD(*fc, softmax_scale=scale, causal=True, return_lse=True), warmup=5, rep=50)
    return bwd, bwd_c, fwd, fwd_c


if __name__ == "__main__":
    recording_fwd.__dict__.update(FWD.__dict__)  # FA4 reaches its compile cache through the name
    recording_bwd.__dict__.update(BWD.__dict__)
    fi._flash_attn_fwd, fi._flash_attn_bwd = recording_fwd, recording_bwd
    for swiglu in sys.argv[1:]:
        found = layouts(swiglu)
        torch.cuda.empty_cache()
        for phase in ("fwd", "bwd"):
            print(swiglu, phase, found[phase], flush=True)
        bwd, bwd_c, fwd, fwd_c = timings(found)
        print(f"{swiglu}: bwd as in the step {bwd:.3f} ms, contiguous {bwd_c:.3f} ms; "
              f"fwd as in the step {fwd:.3f} ms, contiguous {fwd_c:.3f} ms", flush=True)
        torch.cuda.empty_cache()
