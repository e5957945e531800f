"""What kind of work a GPU kernel does, from its name: attention, matrix multiply, a Triton kernel
(Inductor's fusions, Liger's and trainperf's kernels), or the rest (PyTorch's elementwise,
reduction and copy kernels, and the CPU-side ops of a CPU profile). Summed per kind, two
profiles of one step show where a recipe's gain comes from."""

from __future__ import annotations

import re

import pandas as pd

KINDS = (
    ("attention", re.compile(r"flash|fmha|sdpa|attn|attention", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|xmma|wgmma|cublas|cutlass|matmul|aten::(mm|addmm|bmm)\b", re.I)),
    # Triton names a kernel after its Python function: a bare identifier (CUDA libraries' kernels
    # carry C++ signatures, `void at::native::...`)
    ("triton", re.compile(r"^[A-Za-z_]\w*$")),
)
OTHER = "other"


def kernel_kind(name: str) -> str:
    """The first kind whose pattern the kernel's name matches; `other` if none."""
    return next((kind for kind, pattern in KINDS if pattern.search(name)), OTHER)


def time_by_kind(kernels: pd.DataFrame) -> pd.Series:
    """Kernel milliseconds per kind (a breakdown's kernels table: kernel, total_ms), in KINDS order."""
    order = [kind for kind, _ in KINDS] + [OTHER]
    kinds = kernels.kernel.map(kernel_kind)
    return kernels.total_ms.groupby(kinds).sum().reindex(order, fill_value=0.0)
