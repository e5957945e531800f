"""How many instructions does each float8 cast kernel issue an element, compiled for Hopper?

A kernel that moves few bytes an element can spend longer issuing its instructions than moving
them: an H200's 132 SMs issue about 2.8e13 thread-instructions a second at 1.65 GHz, so 134M
elements (the SwiGLU output of the Llama-3.2-1B step at 1 x 16384) at 40 instructions each take
about 190 us, as long as moving 0.7 GB. This compiles the float8 MLP's kernels
(kernels/float8_mlp.py) for sm_90 with Triton's own ptxas, no GPU needed, at TILE, SWIGLU_TILE and
another tile, and counts the PTX instructions each thread runs for its share of a tile, and among
them the special-function ones (exp2, reciprocal), which issue at an eighth of the
rate. Pointers and dims are taken as multiples of 16, as at the step's shapes.
Usage: PYTHONPATH=src python3 benchmarks/probes/float8_kernel_instructions.py
"""

from __future__ import annotations

import collections
import re

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from trainperf.kernels import float8_mlp as mlp

HOPPER = GPUTarget("cuda", 90, 32)
SCALARS = ("SCALE", "AMAX", "GU_INV", "GU_AMAX")  # pointers to one float: no alignment assumed
SPECIAL = ("ex2", "rcp", "div.full", "lg2", "rsqrt", "sqrt")
TILES = ((*mlp.TILE, mlp.WARPS), (*mlp.SWIGLU_TILE, mlp.WARPS), (64, 256, 8))
CAST_ARGS = {"X": "*bf16", "Y": "*fp8e4nv", "YT": "*fp8e4nv", "SCALE": "*fp32", "AMAX": "*fp32", "M": "i32",
             "N": "i32"}
SWIGLU_ARGS = {"GU": "*fp8e4nv", "Y": "*fp8e4nv", "YT": "*fp8e4nv", "SCALE": "*fp32", "AMAX": "*fp32",
               "T": "i32", "F": "i32"}
BWD_ARGS = {"DH": "*bf16", "GU": "*fp8e4nv", "Y": "*fp8e5", "YT": "*fp8e5", "SCALE": "*fp32", "AMAX": "*fp32",
            "T": "i32", "F": "i32", "GU_INV": "*fp32"}
E4M3_MAX, E5M2_MAX = mlp.float8_max(mlp.E4M3), mlp.float8_max(mlp.E5M2)
# name: (kernel, its pointer and int arguments, its other arguments: None where the kernel takes a
# pointer there, a constant otherwise)
KERNELS = {
    "cast": (mlp._cast_kernel, CAST_ARGS, {"FMAX": E4M3_MAX}),
    "swiglu, bf16 gu": (mlp._swiglu_kernel, {**SWIGLU_ARGS, "GU": "*bf16"},
                        {"FMAX": E4M3_MAX, "GU_INV": None, "GU_AMAX": None}),
    "swiglu, e4m3 gu": (mlp._swiglu_kernel, {**SWIGLU_ARGS, "GU_INV": "*fp32", "GU_AMAX": "*fp32"},
                        {"FMAX": E4M3_MAX}),
    "swiglu backward, e4m3 gu": (mlp._swiglu_bwd_kernel, BWD_ARGS, {"FMAX": E5M2_MAX}),
    "swiglu backward, bf16 gu": (mlp._swiglu_bwd_kernel, {**BWD_ARGS, "GU": "*bf16", "GU_INV": "constexpr"},
                                 {"FMAX": E5M2_MAX, "GU_INV": None}),
}


def instructions(kernel: triton.JITFunction, args: dict[str, str], constants: dict[str, object],
                 tile: tuple[int, int, int]) -> list[str]:
    """The opcodes of the PTX `kernel` compiles to for sm_90 at `tile`."""
    bm, bn, warps = tile
    constants = {**constants, "BM": bm, "BN": bn}
    signature = {name: args.get(name, "constexpr") for name in kernel.arg_names}
    aligned = {(kernel.arg_names.index(name),): [["tt.divisibility", 16]]
               for name, kind in signature.items() if kind != "constexpr" and name not in SCALARS}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants, attrs=aligned)
    ptx = triton.compile(source, target=HOPPER, options={"num_warps": warps}).asm["ptx"]
    return [line.split()[0] for line in map(str.strip, ptx.splitlines())
            if re.match(r"[a-z]", line) and not line.startswith(("//", "."))]


def main() -> None:
    print(f"Triton {triton.__version__}, PTX for sm_90; instructions a thread issues per element of its tile")
    for name, (kernel, args, constants) in KERNELS.items():
        for tile in TILES:
            ops = instructions(kernel, args, constants, tile)
            elements = tile[0] * tile[1] / (32 * tile[2])
            special = sum(n for op, n in collections.Counter(ops).items() if op.startswith(SPECIAL))
            print(f"{name:26s} tile {tile[0]}x{tile[1]} {tile[2]} warps: {len(ops) / elements:5.1f} an "
                  f"element, {special / elements:.2f} of them special", flush=True)


if __name__ == "__main__":
    main()
