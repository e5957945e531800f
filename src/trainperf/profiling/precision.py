"""What autocast really does: the dtype of parameters, module outputs, logits, loss and gradients
under each precision mode, and why accumulators stay in float32."""

from __future__ import annotations

import pandas as pd
import torch

from trainperf.models.lm import LMConfig, TransformerLM, lm_loss
from trainperf.workloads.precision import autocast

SMALL = LMConfig(vocab_size=100, context_length=16, d_model=32, d_ff=64, n_layers=1, n_heads=2)


def dtype_report(device: torch.device, modes: tuple[str, ...] = ("fp32", "bf16", "fp16")) -> pd.DataFrame:
    """One row per (mode, tensor): the dtype it has in a forward + backward under that mode."""
    rows = []
    for mode in modes:
        torch.manual_seed(0)
        model = TransformerLM(SMALL).to(device)
        seen: dict[str, str] = {}

        def hook(name, seen=seen):  # noqa: ANN001, ANN202
            def record(_m, _i, out) -> None:  # noqa: ANN001 - returning None keeps the output
                seen.setdefault(name, str(out.dtype))
            return record

        handles = [model.layers[0].attn.qkv_proj.register_forward_hook(hook("linear output (qkv_proj)")),
                   model.layers[0].attn.prenorm.register_forward_hook(hook("norm output (attn prenorm)")),
                   model.layers[0].mlp.register_forward_hook(hook("mlp output"))]
        x = torch.randint(0, SMALL.vocab_size, (2, 16), device=device)
        try:
            with autocast(device, mode):
                logits = model(x)
                loss = lm_loss(logits, x)
            loss.backward()
        except RuntimeError as exc:
            rows.append({"mode": mode, "tensor": "(all)", "dtype": f"unsupported here: {exc}"[:120]})
            continue
        finally:
            for h in handles:
                h.remove()
        rows.append({"mode": mode, "tensor": "parameters", "dtype": _dtypes(model.parameters())})
        rows += [{"mode": mode, "tensor": k, "dtype": v} for k, v in seen.items()]
        rows.append({"mode": mode, "tensor": "logits", "dtype": str(logits.dtype)})
        rows.append({"mode": mode, "tensor": "loss", "dtype": str(loss.dtype)})
        grads = _dtypes(p.grad for p in model.parameters())
        rows.append({"mode": mode, "tensor": "gradients", "dtype": grads})
    return pd.DataFrame(rows)


def _dtypes(tensors) -> str:  # noqa: ANN001
    return ", ".join(sorted({str(t.dtype) for t in tensors if t is not None}))


def accumulation_experiment(value: float = 0.01, count: int = 1000) -> pd.DataFrame:
    """Sum `value` `count` times with different value and accumulator dtypes; exact answer beside."""
    cases = [("fp32 values, fp32 accumulator", torch.float32, torch.float32),
             ("fp16 values, fp16 accumulator", torch.float16, torch.float16),
             ("fp16 values, fp32 accumulator", torch.float16, torch.float32),
             ("bf16 values, bf16 accumulator", torch.bfloat16, torch.bfloat16),
             ("bf16 values, fp32 accumulator", torch.bfloat16, torch.float32)]
    exact = value * count
    rows = []
    for name, value_dtype, acc_dtype in cases:
        acc = torch.zeros((), dtype=acc_dtype)
        v = torch.tensor(value, dtype=value_dtype)
        for _ in range(count):
            acc += v.to(acc_dtype)
        result = float(acc)
        rows.append({"case": name, "result": result, "exact": exact, "abs_error": abs(result - exact)})
    return pd.DataFrame(rows)
