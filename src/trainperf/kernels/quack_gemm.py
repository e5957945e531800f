"""Matrix products on quack's GEMM where a configuration tuned for this GPU is known (`--gemm quack`),
on cuBLAS otherwise.

quack's autotuner picks a GEMM's tile, cluster and scheduler by timing its candidates: minutes for
the LM head's products on a machine's first run, and its default configuration is slower than
cuBLAS (docs/peers.md). So trainperf keeps the autotuner's picks, one per product (shape, operand
layouts, whether it adds into its output), per GPU model and quack version: those shipped beside
this module (`quack_gemm_configs.json`, measured on the GPUs of the committed results) and those a
user tunes on their own GPU (`tools/tune_quack_gemms.py`, into `$TRAINPERF_CACHE_DIR`). A pick is
kept only where it beat cuBLAS alone when it was tuned. A product without one, on another GPU or
quack version, or off the GPU, runs on PyTorch's matmul, as it would without this module.

Inside compiled graphs the product is a custom op (`trainperf::tuned_mm`); the attention
projections' Linear is `tuned_linear`, an op with autograd: its forward and input gradient are
tuned products, its weight gradient stays on cuBLAS (quack's were slower there alone).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import torch

from trainperf.core.errors import Unsupported
from trainperf.kernels import quack_mlp

SHIPPED = Path(__file__).with_name("quack_gemm_configs.json")


def user_file() -> Path:
    """Where tools/tune_quack_gemms.py keeps the picks it makes on this machine."""
    root = os.environ.get("TRAINPERF_CACHE_DIR") or Path.home() / ".cache" / "trainperf"
    return Path(root) / "quack_gemm_configs.json"


def product_key(a: torch.Tensor, b: torch.Tensor, accumulate: bool = False) -> str:
    """The product a @ b (a [M, K], b [K, N]) as the tables name it: its sizes, which dimension of
    each operand is contiguous, and whether it adds into its output."""
    (m, k), n = a.shape, b.shape[1]
    a_major = "k" if a.stride(-1) == 1 else "m"
    b_major = "n" if b.stride(-1) == 1 else "k"
    return f"{m}x{n}x{k} A:{a_major} B:{b_major}{' +=' if accumulate else ''}"


@functools.cache
def gpu_key(device: torch.device) -> str:
    """The GPU model and the quack version a pick holds for (looked up once per device: every
    product asks)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        quack = version("quack-kernels")
    except PackageNotFoundError:  # a source checkout without the package's metadata
        import quack as package

        quack = package.__version__
    return f"{torch.cuda.get_device_name(device)} | quack-kernels {quack}"


@functools.cache
def picks(gpu: str) -> dict[str, dict]:
    """The picks for `gpu` (a gpu_key) that beat cuBLAS: the shipped ones, then the user's own,
    which win where both have one. A file that cannot be read counts as empty."""
    found: dict[str, dict] = {}
    for path in (SHIPPED, user_file()):
        try:
            found.update(json.loads(path.read_text()).get(gpu, {}))
        except (OSError, ValueError, AttributeError):
            continue
    return {key: pick for key, pick in found.items() if pick.get("quack_ms", 1) < pick.get("cublas_ms", 0)}


def tuned_here(device: torch.device) -> bool:
    """Whether quack runs on `device` and any product has a pick for it."""
    return quack_mlp.quack_runs(device) and bool(picks(gpu_key(device)))


def require_tuned(device: torch.device) -> None:
    """Unsupported unless quack runs on `device` and knows tuned configurations for it (naming the
    install command, the GPU it needs, or the tool that tunes them)."""
    quack_mlp.require_quack(device, "--gemm quack")
    if not tuned_here(device):
        raise Unsupported(f"--gemm quack knows no configuration tuned for {gpu_key(device)}: "
                          "tune them with tools/tune_quack_gemms.py")


def pick_for(a: torch.Tensor, b: torch.Tensor, accumulate: bool = False) -> dict | None:
    """The tuned pick for a @ b, or None (cuBLAS then)."""
    if a.dtype not in (torch.bfloat16, torch.float16) or not quack_mlp.quack_runs(a.device):
        return None
    return picks(gpu_key(a.device)).get(product_key(a, b, accumulate))


def run_pick(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, pick: dict, accumulate: bool) -> None:
    """out (+)= a @ b on quack's GEMM with configuration `pick`."""
    from quack.gemm_config import GemmConfig
    from quack.gemm_interface import gemm_tuned

    quack_mlp.load_quack()
    gemm_tuned.fn(a, b, out, None, add_to_output=accumulate, dynamic_scheduler=pick["dynamic_scheduler"],
                  config=GemmConfig(**pick["config"]))


def mm_into(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, accumulate: bool = False,
            tuned: bool = True) -> None:
    """out = a @ b, or out += a @ b with `accumulate`: on quack where a pick is known and `tuned`,
    else by PyTorch (cuBLAS on the GPU)."""
    pick = pick_for(a, b, accumulate) if tuned else None
    if pick is not None:
        run_pick(a, b, out, pick, accumulate)
    elif accumulate:
        out.addmm_(a, b)
    else:
        torch.mm(a, b, out=out)


@torch.library.custom_op("trainperf::tuned_mm", mutates_args=())
def tuned_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b (a [M, K], b [K, N]) into a new tensor, by mm_into."""
    out = a.new_empty(a.shape[0], b.shape[1])
    mm_into(a, b, out)
    return out


@tuned_mm.register_fake
def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.new_empty(a.shape[0], b.shape[1])


@torch.library.custom_op("trainperf::tuned_linear", mutates_args=())
def tuned_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weightᵀ (a Linear without bias), x [*, K], weight [N, K]."""
    return tuned_mm(quack_mlp.as_rows(x), weight.t()).view(*x.shape[:-1], weight.shape[0])


@tuned_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def _setup(ctx, inputs, output) -> None:  # noqa: ANN001
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):  # noqa: ANN001, ANN202
    x, weight = ctx.saved_tensors
    rows = quack_mlp.as_rows(grad)
    grad_x = torch.ops.trainperf.tuned_mm(rows, weight).view(x.shape)
    return grad_x, rows.t() @ quack_mlp.as_rows(x)


tuned_linear.register_autograd(_backward, setup_context=_setup)
