"""NVIDIA's PyTorch-vs-cuDNN study of a Llama forward pass, on the GPU at hand: the same model
profiled twice by module range, once with PyTorch modules (HF's RMSNorm, PyTorch's cuDNN SDPA) and
once with cuDNN-frontend graphs (`--norm cudnn`, attention `CUDNN_FE`), then compared range by
range: calls, kernels, kernel time and speed-up. The study timed the forward pass; the training
iteration (forward, backward, SGD step) is the second table it did not have.
"""

from __future__ import annotations

import gc
from dataclasses import replace

import pandas as pd
import torch

from trainperf.profiling.breakdown import Breakdown
from trainperf.profiling.session import compare_breakdowns, profile_workload

# The two sides: what each swaps into the same Llama.
SIDES = {"pytorch": {"sdpa_backend": "CUDNN_ATTENTION", "norm": "torch"},
         "cudnn": {"sdpa_backend": "CUDNN_FE", "norm": "cudnn"}}
# The study's rows, under trainperf's range names (q/k/v are three projections here, one there).
STUDY_RANGES = ("fwd", "fwd.layer.attn.attn", "fwd.layer.attn.attn.gqa", "fwd.layer.attn.attn.q_proj",
                "fwd.layer.attn.attn.k_proj", "fwd.layer.attn.attn.v_proj", "fwd.layer.attn.attn.o_proj",
                "fwd.layer.attn.attn.rope", "fwd.layer.attn.prenorm", "fwd.layer.mlp.mlp",
                "fwd.layer.mlp.prenorm", "fwd.output_norm")


def profile_side(spec, device: torch.device, forward_only: bool, iters: int) -> Breakdown:  # noqa: ANN001
    """The per-range breakdown of one side (a LlamaSpec), its model freed afterwards."""
    from trainperf.workloads.llama_sdpa import LlamaStep, choose_kv_mode

    step = LlamaStep(spec, device)
    try:
        choose_kv_mode(step, spec.sdpa_backend, spec.kv_heads)
        run = step.forward_pass if forward_only else step
        return profile_workload(run, step.model, device, steps=iters)
    finally:
        step.close()
        del step
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def side_spec(base, side: str):  # noqa: ANN001, ANN201
    """`base` (a LlamaSpec) with one side's swaps."""
    return replace(base, **SIDES[side])


def study_table(pytorch: Breakdown, cudnn: Breakdown, study_rows_only: bool) -> pd.DataFrame:
    """range | calls | PyTorch kernels | PyTorch ms | cuDNN kernels | cuDNN ms | speed-up."""
    names = {"A kernels": "PyTorch kernels", "A ms": "PyTorch ms", "B kernels": "cuDNN kernels",
             "B ms": "cuDNN ms"}
    table = compare_breakdowns(pytorch, cudnn).rename(columns=names)
    if study_rows_only:
        table = table[table["range"].isin(STUDY_RANGES)]
    return table.reset_index(drop=True)
