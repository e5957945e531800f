"""Time every autotuning candidate of the cross-entropy kernel on one LM-head logits block.

The chunked loss's block is [4096 tokens, 128256 vocab] in bf16 for Llama-3.2-1B. Prints each
config's time (the autotuner's own measurement) and the bandwidth of its 3 passes over the block.
Usage: PYTHONPATH=src python3 benchmarks/probes/ce_kernel_configs.py [rows] [vocab]
"""

from __future__ import annotations

import sys

import torch

from trainperf.kernels.cross_entropy import _ce_kernel, cross_entropy_grad_


def main(rows: int = 4096, vocab: int = 128256) -> None:
    logits = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16)
    targets = torch.randint(0, vocab, (rows,), device="cuda")
    cross_entropy_grad_(logits, targets, 1.0 / rows)
    moved = 3 * logits.numel() * logits.element_size()  # read twice, written once
    print("config,ms,GB_per_s")
    for cfg, ms in sorted(_ce_kernel.configs_timings.items(), key=lambda kv: kv[1][0]):
        t = ms[0] if isinstance(ms, list | tuple) else ms
        print(f"\"{cfg}\",{t:.4f},{moved / t / 1e6:.0f}")
    print(f"chosen: {_ce_kernel.best_config}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
