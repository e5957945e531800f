"""Does torch.compile keep the gradients of trainperf's float8 products? A two-layer GPT LM in bf16
on a GPU with `--float8 trainperf`, eager and with its layers compiled, without checkpointing and
under `full+attn`, beside the same model without float8 compiled: the norm of each decoder weight's
gradient in the second layer after two steps (zeros where compile lost them).
usage: PYTHONPATH=src python3 benchmarks/probes/float8_compiled_grads.py
"""

from __future__ import annotations

import torch

from trainperf.models.lm import LMConfig, TransformerLM, float8_blocks
from trainperf.workloads.sharded import apply_checkpointing


def gradient_norms(checkpoint: str, compiled: bool, float8: bool = True) -> dict[str, float]:
    cfg = LMConfig(vocab_size=64, context_length=32, d_model=64, d_ff=256, n_layers=2, n_heads=4)
    torch.manual_seed(0)
    with torch.device("cuda"):
        lm = TransformerLM(cfg).to(torch.bfloat16)
    lm.bind_attention(torch.device("cuda"))
    if float8:
        float8_blocks(lm)
    apply_checkpointing(lm, checkpoint)
    if compiled:
        lm.compile_layers()
    tokens = torch.randint(0, 64, (2, 32), device="cuda")
    for _ in range(2):
        lm.zero_grad()
        lm(tokens).float().logsumexp(-1).mean().backward()
    return {n.split(".")[-2]: round(float(p.grad.float().norm()), 3)
            for n, p in lm.named_parameters() if p.ndim == 2 and "layers.1" in n}


if __name__ == "__main__":
    for checkpoint in ("none", "full+attn"):
        print(checkpoint, "eager", gradient_norms(checkpoint, False), "\n   compiled",
              gradient_norms(checkpoint, True), "\n   bf16 compiled", gradient_norms(checkpoint, True, False),
              flush=True)
