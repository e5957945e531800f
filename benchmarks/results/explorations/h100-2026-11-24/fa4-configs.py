"""Probe: FlashAttention 4's Hopper tile configurations at Llama-3.2-1B's attention shapes.
usage: python3 fa4-configs.py DEADLINE_EPOCH BATCHxSEQ...

Causal bf16 attention with 32 query heads, 8 K/V heads and head dim 64, as in `fast`'s step. The
forward takes its tile, RS/overlap and pack-GQA choices as arguments; the backward's tile comes
from flash-attn-4's `_tile_size_bwd_sm90`, replaced here per candidate. Each candidate is timed in
alternating rounds (CUDA events, 10 calls each) against the default, and its outputs are checked
against the default's.
"""

import functools
import sys
import time

import torch
from flash_attn.cute import interface as fa

FWD = {  # name: keyword arguments of _flash_attn_fwd
    "default": {},
    "128x128": {"tile_mn": (128, 128), "mma_pv_is_rs": True, "intra_wg_overlap": True},
    "128x192": {"tile_mn": (128, 192), "mma_pv_is_rs": True, "intra_wg_overlap": True},
    "192x128-nopack": {"pack_gqa": False},
}
_B = fa.BwdConfig
BWD = {  # name: BwdConfig (m, n, stages Q, dO, PdS, swapAB SdP, dKV, dQ, atom layouts SdP, dKV, dQ)
    "default": None,
    "128x128-dQswap": _B(128, 128, 2, 2, 2, True, False, True, 1, 2, 2),
    "128x128-dQatom1": _B(128, 128, 2, 2, 2, True, False, False, 1, 2, 1),
    "128x128-PdS1": _B(128, 128, 2, 2, 1, True, False, False, 1, 2, 2),
    "64x128": _B(64, 128, 2, 2, 2, True, False, False, 1, 2, 1),
    "128x96": _B(128, 96, 2, 2, 2, False, True, False, 2, 2, 2),
    "128x64": _B(128, 64, 2, 2, 2, False, False, False, 2, 1, 2),
}
_DEFAULT_BWD = fa._tile_size_bwd_sm90


def timed(fn, n: int = 10) -> float:  # noqa: ANN001
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def use_bwd(cfg) -> None:  # noqa: ANN001
    fa._tile_size_bwd_sm90 = _DEFAULT_BWD if cfg is None else (lambda *a, **k: cfg)


def compare(label: str, run, ref, flops: float, err: float) -> None:  # noqa: ANN001
    rounds = [(timed(run), timed(ref)) for _ in range(3)]
    ms, base = (sum(r[i] for r in rounds) / 3 for i in (0, 1))
    print(f"{label:28s} {ms:7.3f} ms ({flops / ms / 1e9:5.0f} TFLOP/s) default {base:7.3f} ms "
          f"ratio {base / ms:.3f}  max diff {err:.2e}", flush=True)


def probe_shape(b: int, s: int, deadline: float) -> None:
    torch.manual_seed(0)
    q = torch.randn(b, s, 32, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, 8, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    flops = 4 * s * s * 64 * 32 * b / 2  # causal forward
    scale = 64 ** -0.5

    def fwd(**kw):  # noqa: ANN003, ANN202
        return fa._flash_attn_fwd(q, k, v, softmax_scale=scale, causal=True, return_lse=True, **kw)

    def bwd(cfg=None):  # noqa: ANN001, ANN202
        use_bwd(cfg)
        try:
            return fa._flash_attn_bwd(q, k, v, ref_o, do, ref_lse, scale, True)[:3]
        finally:
            use_bwd(None)

    ref_o, ref_lse, *_ = fwd()
    ref_grads = bwd()
    for name, kw in FWD.items():
        if time.time() > deadline:
            print("deadline reached", flush=True)
            return
        try:
            err = (fwd(**kw)[0].float() - ref_o.float()).abs().max().item()
            compare(f"{b}x{s} fwd {name}", functools.partial(fwd, **kw), fwd, flops, err)
        except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
            print(f"{b}x{s} fwd {name}: error {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    for name, cfg in BWD.items():
        if time.time() > deadline:
            print("deadline reached", flush=True)
            return
        try:
            err = max((g.float() - r.float()).abs().max().item()
                      for g, r in zip(bwd(cfg), ref_grads, strict=True))
            compare(f"{b}x{s} bwd {name}", functools.partial(bwd, cfg), bwd, 2.5 * flops, err)
        except Exception as exc:  # noqa: BLE001
            print(f"{b}x{s} bwd {name}: error {type(exc).__name__}: {str(exc)[:300]}", flush=True)


def main() -> None:
    deadline = float(sys.argv[1])
    for shape in sys.argv[2:]:
        probe_shape(*map(int, shape.split("x")), deadline)


if __name__ == "__main__":
    main()
