"""Which of FlashAttention 4's Hopper backward tiles is fastest for Llama-3.2-1B's attention (32
query heads, 8 K/V heads, head dim 64, causal), and can cuDNN's forward feed FA4's backward?

FA4 picks one backward tile per head dim (128 x 128 for 64, from FA3's table); at short
sequences each program covers few key blocks, so its start and end weigh more. Every feasible
tile from FA4's own search (`sm90_config_search.py`) that looks promising is compiled, checked
against the default's gradients and timed (median of `do_bench`). Then cuDNN's forward (through
PyTorch, with its log-sum-exp) is timed against FA4's and its output and log-sum-exp handed to
FA4's backward, whose gradients are compared with FA4's own. Last, the backward with K/V
expanded to every query head, the same work without grouped-query accumulation.
Usage: PYTHONPATH=src python3 benchmarks/probes/fa4_bwd_configs.py [BxS ...]
"""

from __future__ import annotations

import sys

import flash_attn.cute.interface as fa
import torch
import triton

HEADS, KV_HEADS, DIM = 32, 8, 64
DEFAULT = fa._tile_size_bwd_sm90


def config(tm: int, tn: int, sdp: bool, dkv: bool, dq: bool, a_sdp: int, a_dkv: int, a_dq: int,
           pds: int = 2) -> fa.BwdConfig:
    return fa.BwdConfig(m_block_size=tm, n_block_size=tn, num_stages_Q=2, num_stages_dO=2,
                        num_stages_PdS=pds, SdP_swapAB=sdp, dKV_swapAB=dkv, dQ_swapAB=dq,
                        AtomLayoutMSdP=a_sdp, AtomLayoutNdKV=a_dkv, AtomLayoutMdQ=a_dq)


CONFIGS = {
    "128x128 (default)": None,
    "128x128 dQ swap": config(128, 128, True, False, True, 1, 2, 2),
    "128x128 PdS 1": config(128, 128, True, False, False, 1, 2, 2, pds=1),
    "64x128": config(64, 128, True, False, False, 1, 2, 1),
    "64x128 dQ swap": config(64, 128, True, False, True, 1, 2, 2),
    "64x192": config(64, 192, False, True, False, 1, 2, 1),
    "128x96": config(128, 96, False, True, False, 2, 2, 2),
    "128x64": config(128, 64, False, False, False, 2, 1, 2),
    "64x96": config(64, 96, False, True, False, 1, 2, 1),
}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def bwd(q, k, v, o, do, lse, cfg):  # noqa: ANN001, ANN201
    fa._tile_size_bwd_sm90 = DEFAULT if cfg is None else (lambda *a, **kw: cfg)
    try:
        return fa._flash_attn_bwd(q, k, v, o, do, lse, DIM ** -0.5, True)[:3]
    finally:
        fa._tile_size_bwd_sm90 = DEFAULT


def flops(b: int, s: int) -> float:
    return 4 * b * HEADS * s * s * DIM / 2  # causal: half of QK^T and PV


def shape(b: int, s: int) -> None:
    q = torch.randn(b, s, HEADS, DIM, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, KV_HEADS, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse, *_ = fa._flash_attn_fwd(q, k, v, softmax_scale=DIM ** -0.5, causal=True, return_lse=True)
    ref = bwd(q, k, v, o, do, lse, None)
    base = None
    for name, cfg in CONFIGS.items():
        try:
            grads = bwd(q, k, v, o, do, lse, cfg)
            err = max(rel(g, r) for g, r in zip(grads, ref, strict=True))
            ms = triton.testing.do_bench(lambda cfg=cfg: bwd(q, k, v, o, do, lse, cfg), warmup=50, rep=400,
                                         return_mode="median")
        except Exception as exc:  # noqa: BLE001 — an infeasible tile is a finding, not a stop
            print(f"{b}x{s} bwd {name:18s} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}",
                  flush=True)
            continue
        base = base or ms
        print(f"{b}x{s} bwd {name:18s} {ms:.4f} ms {2.5 * flops(b, s) / ms / 1e9:4.0f} TFLOP/s "
              f"{base / ms:.3f}x  max rel err vs default {err:.1e}", flush=True)
    # the same attention with K/V expanded to every query head: no fp32 dK/dV accumulated across
    # the heads of a group (what a backward that packs a group's heads into one program would save)
    ke, ve = (t.repeat_interleave(HEADS // KV_HEADS, dim=2) for t in (k, v))
    oe, lsee, *_ = fa._flash_attn_fwd(q, ke, ve, softmax_scale=DIM ** -0.5, causal=True, return_lse=True)
    t_gqa = triton.testing.do_bench(lambda: bwd(q, k, v, o, do, lse, None), warmup=50, rep=400,
                                    return_mode="median")
    t_mha = triton.testing.do_bench(lambda: bwd(q, ke, ve, oe, do, lsee, None), warmup=50, rep=400,
                                    return_mode="median")
    print(f"{b}x{s} bwd with {KV_HEADS} K/V heads {t_gqa:.4f} ms, with K/V expanded to {HEADS} "
          f"{t_mha:.4f} ms ({t_gqa / t_mha:.3f}x)", flush=True)
    # cuDNN's forward feeding FA4's backward
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    try:
        run = lambda: torch.ops.aten._scaled_dot_product_cudnn_attention(  # noqa: E731
            qt, kt, vt, None, True, 0.0, True, False, scale=DIM ** -0.5)
        out = run()
    except Exception as exc:  # noqa: BLE001
        print(f"{b}x{s} cudnn fwd failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}", flush=True)
        return
    o2, lse2 = out[0].transpose(1, 2), out[1].reshape(lse.shape)
    print(f"{b}x{s} cudnn out strides {tuple(out[0].stride())} lse {tuple(out[1].shape)} "
          f"out rel diff {rel(o2, o):.1e} lse max diff {(lse2 - lse).abs().max().item():.1e}", flush=True)
    grads = bwd(q, k, v, o2.contiguous(), do, lse2.contiguous(), None)
    t_fa = triton.testing.do_bench(lambda: fa._flash_attn_fwd(q, k, v, softmax_scale=DIM ** -0.5, causal=True,
                                                              return_lse=True), warmup=50, rep=400,
                                   return_mode="median")
    t_cu = triton.testing.do_bench(run, warmup=50, rep=400, return_mode="median")
    err = max(rel(g, r) for g, r in zip(grads, ref, strict=True))
    print(f"{b}x{s} fwd fa4 {t_fa:.4f} ms cudnn {t_cu:.4f} ms ({t_fa / t_cu:.3f}x); FA4 bwd from cuDNN's "
          f"forward: max rel err of dq/dk/dv vs FA4's own {err:.1e}", flush=True)


def main(shapes: list[str]) -> None:
    print(torch.cuda.get_device_name(), torch.__version__, "cuDNN", torch.backends.cudnn.version(),
          flush=True)
    for s in shapes:
        b, n = map(int, s.split("x"))
        shape(b, n)


if __name__ == "__main__":
    main(sys.argv[1:] or ["24x768", "12x1024", "2x8192"])
