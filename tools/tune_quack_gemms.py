"""Tune quack's GEMM for the products of trainperf's fastest Llama step on this GPU, and keep the
picks where `--gemm quack` finds them (kernels/quack_gemm.py).

    PYTHONPATH=src python3 tools/tune_quack_gemms.py [--tokens 16384,12288,18432,8192] [--out FILE]
        [--deadline EPOCH_S]

For each product of the attention projections (forward and input gradient) and of the chunked
loss's LM head, at each token count: quack's autotuner picks a configuration, then the pick and
cuBLAS are timed alone (median of triton's do_bench), and both times are kept beside the pick;
only picks that beat cuBLAS are used. Each product is written as soon as it is tuned, and products
already in the file are skipped, so a stopped run resumes. The default file is the user's
(quack_gemm.user_file()); the shipped table is `src/trainperf/kernels/quack_gemm_configs.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch
import triton.testing

from trainperf.kernels import quack_gemm
from trainperf.kernels.chunked_loss import chunk_rows
from trainperf.models import hf_llama


def products(cfg: object, tokens: int, rows: int) -> list[tuple]:
    """The tunable products of one step of the Llama `cfg` at `tokens` tokens (the head's in blocks
    of `rows`): (name, A [M, K] as (rows, cols, transposed), B [K, N] likewise, accumulate, dynamic
    scheduler), a transposed operand being a view of a row-major tensor of the other shape, as the
    step has it."""
    hidden, vocab = cfg.hidden_size, cfg.vocab_size
    kv = cfg.num_key_value_heads * getattr(cfg, "head_dim", hidden // cfg.num_attention_heads)
    found = [("q/o forward", (tokens, hidden, False), (hidden, hidden, True), False, False),
             ("k/v forward", (tokens, hidden, False), (hidden, kv, True), False, False),
             ("q/o input gradient", (tokens, hidden, False), (hidden, hidden, False), False, False),
             ("k/v input gradient", (tokens, kv, False), (kv, hidden, False), False, False)]
    blocks = [min(rows, tokens - i) for i in range(0, tokens, rows)]
    for i, r in enumerate(blocks):
        found += [("head logits", (r, hidden, False), (hidden, vocab, True), False, False),
                  ("head hidden gradient", (r, vocab, False), (vocab, hidden, False), False, True),
                  ("head weight gradient", (vocab, r, True), (r, hidden, False), i > 0, True)]
    return found


def operand(rows: int, cols: int, transposed: bool, device: str = "cuda") -> torch.Tensor:
    """A [rows, cols] bf16 operand, as a transposed view where the step has one (scaled so that
    products stay in bf16's range)."""
    shape = (cols, rows) if transposed else (rows, cols)
    t = torch.randn(shape, device=device, dtype=torch.bfloat16) / 8
    return t.t() if transposed else t


def tune_one(a: torch.Tensor, b: torch.Tensor, accumulate: bool, dynamic: bool) -> dict:
    from quack.gemm_interface import gemm_tuned

    from trainperf.kernels.quack_mlp import load_quack

    load_quack()
    out = torch.zeros(a.shape[0], b.shape[1], device="cuda", dtype=a.dtype)
    gemm_tuned(a, b, out, None, add_to_output=accumulate, dynamic_scheduler=dynamic)
    pick = {"config": dataclasses.asdict(gemm_tuned.best_config.kwargs["config"]),
            "dynamic_scheduler": dynamic}
    check = torch.zeros_like(out)
    quack_gemm.run_pick(a, b, check, pick, accumulate)
    ref = (a.float() @ b.float())
    err = ((check.float() - ref).norm() / ref.norm()).item()
    if not err < 1e-2:
        raise RuntimeError(f"quack's pick is off: relative error {err:.2e}")

    def on_quack() -> None:
        quack_gemm.run_pick(a, b, out, pick, accumulate)

    def on_cublas() -> None:
        out.addmm_(a, b) if accumulate else torch.mm(a, b, out=out)

    times = {name: triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
             for name, fn in (("quack_ms", on_quack), ("cublas_ms", on_cublas))}
    return {**pick, **{k: round(v, 4) for k, v in times.items()}, "error": float(f"{err:.2e}")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="16384,12288,18432,8192")
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--deadline", type=float, default=float("inf"), help="stop starting products then")
    args = parser.parse_args()
    out = args.out or quack_gemm.user_file()
    cfg = hf_llama.load_config(args.model, None)
    rows = chunk_rows(cfg.vocab_size, torch.bfloat16)
    gpu = quack_gemm.gpu_key(torch.device("cuda"))
    table = json.loads(out.read_text()) if out.is_file() else {}
    mine = table.setdefault(gpu, {})
    print(gpu, flush=True)
    for tokens in map(int, args.tokens.split(",")):
        for name, a_shape, b_shape, accumulate, dynamic in products(cfg, tokens, rows):
            a, b = operand(*a_shape), operand(*b_shape)
            key = quack_gemm.product_key(a, b, accumulate)
            if key in mine:
                continue
            if time.time() > args.deadline:
                print("deadline: stopping before", key, flush=True)
                return
            t0 = time.time()
            mine[key] = {"product": name, **tune_one(a, b, accumulate, dynamic)}
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
            p = mine[key]
            print(f"{key:36s} {name:22s} quack {p['quack_ms']:.4f} ms, cuBLAS {p['cublas_ms']:.4f} ms "
                  f"({p['cublas_ms'] / p['quack_ms']:.3f}x), tuned in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
