"""trainperf's Triton kernels compile for Hopper (sm_90) and Ampere (sm_80) here, without a GPU.

The CPU tests run Triton kernels in its interpreter, which executes them as Python: it checks the
numerics but not that Triton's compiler takes the kernel (a construct the interpreter runs, the
compiler may refuse). Triton's compiler and its ptxas need no GPU, so each kernel is compiled to
sm_90 machine code, and to sm_80 but for what needs Hopper or Ada (the float8 casts, the
FlashAttention-2 backward's tensor descriptors), with the Triton installed here, for the argument
types the workloads give it. The compiles run in a process of their own: the interpreter, on in
this one, patches Triton's language objects in ways its compiler does not survive.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")
from trainperf.kernels import float8_linear as f8l  # noqa: E402
from trainperf.kernels import float8_mlp, float8_norm, rmsnorm  # noqa: E402

COMPILE = """
import json, sys
import triton
from importlib import import_module
from triton.backends.compiler import GPUTarget
from triton.runtime.jit import JITFunction

out = {}
arch, warp = json.loads(sys.argv[2])
for name, (module, kernel, signature, constexprs, options) in json.loads(sys.argv[1]).items():
    fn = getattr(import_module(module), kernel)
    while not isinstance(fn, JITFunction):  # through the autotuner to the jitted function
        fn = fn.fn
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    source = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    options = options if isinstance(options, dict) else {"num_warps": options}
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, warp), options=options)
    out[name] = len(compiled.asm["cubin"])
print(json.dumps(out))
"""

CE = {"X": "*bf16", "T": "*i64", "LOSS": "*fp32", "stride": "i32", "V": "i32", "scale": "fp32"}
NORM_BWD = {"X": "*bf16", "W": "*bf16", "DY": "*bf16", "RSTD": "*fp32", "SKIP": "*bf16", "DX": "*bf16",
            "DW_PARTIAL": "*fp32", "N_ROWS": "i32", "N_COLS": "i32", "ROWS_PER_PROG": "i32"}
ROPE = {"X": "*bf16", "COS": "*bf16", "SIN": "*bf16", "Y": "*bf16", **dict.fromkeys(
    ("N_ROWS", "HEADS", "SEQ", "HALF", "sxb", "sxh", "sxn", "scb", "scn"), "i32"), "SIGN": "fp32"}
F8 = "trainperf.kernels.float8_mlp"
TILE = {"BM": float8_mlp.TILE[0], "BN": float8_mlp.TILE[1]}
SWIGLU_TILE = {"BM": float8_mlp.SWIGLU_TILE[0], "BN": float8_mlp.SWIGLU_TILE[1]}
SWIGLU_BWD_TILE = {"BM": float8_mlp.SWIGLU_BWD_TILE[0], "BN": float8_mlp.SWIGLU_BWD_TILE[1]}


def _float8(x: str, y: str, names: tuple[str, ...], sizes: tuple[str, ...]) -> dict:
    """A float8 MLP kernel's signature: bf16 inputs `names`, float8 outputs of type `y`."""
    return {**dict.fromkeys(names, x), "Y": y, "YT": y, "SCALE": "*fp32", "AMAX": "*fp32",
            **dict.fromkeys(sizes, "i32")}


CASES = {  # name: (module, kernel, signature, constexprs, warps or compile options), as launched
    **{f"scale {t}": ("trainperf.kernels.grad_scale", "_scale_kernel", {"X": t, "S": "*fp32", "N": "i32"},
                      {"BLOCK": 4096}, 8) for t in ("*bf16", "*fp16", "*fp32")},
    **{f"cross-entropy {b}x{w}": ("trainperf.kernels.cross_entropy", "_ce_kernel", CE,
                                   {"BLOCK": b, "GROUP": 16}, w) for b, w in ((2048, 8), (16384, 32))},
    "rmsnorm": ("trainperf.kernels.rmsnorm", "_rmsnorm_fwd", {"X": "*bf16", "W": "*bf16", "Y": "*bf16",
                "RSTD": "*fp32", "N_COLS": "i32", "eps": "fp32"}, {"BLOCK": 2048}, 4),
    # with the residual's gradient added (the float8 layers'), and without
    **{f"rmsnorm backward{' skip' * skip}": (
        "trainperf.kernels.rmsnorm", "_rmsnorm_bwd",
        {k: v for k, v in NORM_BWD.items() if skip or k != "SKIP"},
        {"HAS_SKIP": skip, "BLOCK": 2048, **({} if skip else {"SKIP": None})}, 4) for skip in (True, False)},
    **{f"rmsnorm dw sum {t}": ("trainperf.kernels.rmsnorm", "_sum_partials", {
        "PARTIAL": "*fp32", "DW": t, "PROGRAMS": "i32", "N_COLS": "i32"},
        {"BR": rmsnorm.SUM_TILE[0], "BN": rmsnorm.SUM_TILE[1]}, 4) for t in ("*bf16", "*fp32")},
    "swiglu": ("trainperf.kernels.swiglu", "_swiglu_fwd", {"A": "*bf16", "B": "*bf16", "H": "*bf16",
               "N": "i32"}, {"BLOCK": 1024}, 4),
    "swiglu backward": ("trainperf.kernels.swiglu", "_swiglu_bwd",
                        {**dict.fromkeys(("A", "B", "DH", "DA", "DB"), "*bf16"), "N": "i32"},
                        {"BLOCK": 1024}, 4),
    "rope": ("trainperf.kernels.rope", "_rope_kernel", ROPE, {"ROWS": 16, "BLOCK": 32}, 4),
    "cross-entropy lse": ("trainperf.kernels.cross_entropy", "_loss_lse_kernel",
                          {"X": "*bf16", "T": "*i64", "LOSS": "*fp32", "LSE": "*fp32", "stride": "i32",
                           "V": "i32"},
                          {"BLOCK": 16384, "GROUP": 16}, 32),
    "float8 cast": (F8, "_cast_kernel", _float8("*bf16", "*fp8e4nv", ("X",), ("M", "N")),
                    {"FMAX": 448.0, **TILE}, float8_mlp.WARPS),
    # the LM head's logit gradient, its transpose written into a slice of a wider tensor
    **{f"float8 logits grad{' amax' * (not cast)}": (
        "trainperf.kernels.float8_head", "_grad_cast_kernel",
        {"X": "*bf16", "LSE": "*fp32", "T": "*i64", **_float8(None, "*fp8e5", (), ("M", "V", "LDT")),
         "scale_n": "fp32"},
        {"FMAX": 57344.0, "BM": 64, "BN": 128, "CAST": cast}, float8_mlp.WARPS) for cast in (True, False)},
    # SwiGLU from the gate and up product in float8 (its inverse scale and amax beside it), or in bf16
    **{f"float8 swiglu{' bf16 gu' * (gu == '*bf16')}": (
        F8, "_swiglu_kernel", {**_float8("*bf16", "*fp8e4nv", (), ("T", "F")), "GU": gu,
                               **({"GU_INV": "*fp32", "GU_AMAX": "*fp32"} if gu != "*bf16" else {})},
        {"FMAX": 448.0, **SWIGLU_TILE, **({"GU_INV": None, "GU_AMAX": None} if gu == "*bf16" else {})},
        float8_mlp.WARPS) for gu in ("*fp8e4nv", "*bf16")},
    **{f"float8 swiglu backward{' bf16 gu' * (gu == '*bf16')}": (
        F8, "_swiglu_bwd_kernel", {**_float8("*bf16", "*fp8e5", ("DH",), ("T", "F")), "GU": gu,
                                   **({"GU_INV": "*fp32"} if gu != "*bf16" else {})},
        {"FMAX": 57344.0, **SWIGLU_BWD_TILE, **({"GU_INV": None} if gu == "*bf16" else {})},
        float8_mlp.SWIGLU_BWD_WARPS) for gu in ("*fp8e4nv", "*bf16")},
    # the residual add, the norm and the cast before the float8 MLP, a program per block of rows;
    # without the add, the norm and the cast before the float8 q, k and v product
    **{f"float8{' add' * add} norm cast": ("trainperf.kernels.float8_norm", "_add_norm_cast_kernel", {
        **dict.fromkeys(("X", "B", "S", "W"), "*bf16"), "Y": "*fp8e4nv", "YT": "*fp8e4nv",
        **dict.fromkeys(("RSTD", "SCALE", "AMAX"), "*fp32"), "M": "i32", "N": "i32", "eps": "fp32"},
        {"FMAX": 448.0, "BM": float8_norm.NORM_TILE[0], "BN": float8_norm.NORM_TILE[1], "HAS_B": add},
        float8_norm.NORM_WARPS) for add in (True, False)},
    # the q, k and v product's gradient, q's and k's taken back through RoPE: a program per head
    "float8 qkv rope grad": ("trainperf.kernels.float8_linear", "_qkv_rope_grad_kernel", {
        **dict.fromkeys(("DQ", "DK", "DV", "COS", "SIN"), "*bf16"), **_float8(None, "*fp8e5", (), ()),
        **dict.fromkeys(("M", "N", "SEQ", "HQ", "HK", "sqb", "sqs", "sqh", "skb", "sks", "skh", "svb", "svs",
                         "svh", "scb", "scs"), "i32")},
        {"D": 64, "FMAX": 57344.0, "BM": float8_mlp.TILE[0]}, float8_mlp.WARPS),
    # RoPE's forward on the q, k and v product's output: a program per rows of one head
    "float8 rope qk": ("trainperf.kernels.float8_linear", "_rope_qk_kernel", {
        **dict.fromkeys(("QKV", "COS", "SIN", "Q", "K"), "*bf16"),
        **dict.fromkeys(("M", "N", "SEQ", "HQ", "HK", "scb", "scs"), "i32")},
        {"D": 64, "BM": f8l.ROPE_ROWS}, f8l.ROPE_WARPS),
    "float8 next scale": (F8, "_next_scale_kernel", {"HIST": "*fp32", "NOW": "*fp32", "SCALE": "*fp32",
                          "INV": "*fp32"}, {"FMAX": 448.0, "LEN": 16}, 1),
}


FA2 = "trainperf.attention.flash_triton"
FA2_ARGS = {"HEAD_DIM": 64, "BLOCK_D": 64, "CAUSAL": True, "PRECISION": "tf32", "HEAD_GROUP": 4}
SCALES = {"qk_scale": "fp32", "sm_scale": "fp32", "N_CTX": "i32"}
QKV = dict.fromkeys(("Q", "K", "V"), "*bf16")
ROWS = {"L": "*fp32", "Delta": "*fp32"}
TILES = {"num_warps": 4, "num_stages": 3}
# FlashAttention-2 in Triton, bf16 causal at head dim 64, a tile of each kernel's candidates; its
# backward reads its tiles through tensor descriptors (TMA) on Hopper only
FA2_OUT = {"O": "*bf16", "L": "*fp32", "qk_scale": "fp32", "N_CTX": "i32"}
FA2_CASES = {
    "fa2 forward": (FA2, "_fwd_kernel", {**QKV, **FA2_OUT}, {**FA2_ARGS, "BLOCK_M": 128, "BLOCK_N": 64},
                    TILES),
    "fa2 delta": (FA2, "_bwd_delta_kernel", {"O": "*bf16", "DO": "*bf16", "Delta": "*fp32", "N_ROWS": "i32"},
                  {"HEAD_DIM": 64, "BLOCK_D": 64, "BLOCK_R": 64}, 4),
    **{f"fa2 dq{' tma' * tma}": (
        FA2, "_bwd_dq_kernel", {**QKV, "O": "*bf16", "DO": "*bf16", **ROWS, "DQ": "*bf16", **SCALES},
        {**FA2_ARGS, "TMA": tma, "BLOCK_M": 128, "BLOCK_N": 64}, TILES) for tma in (False, True)},
    **{f"fa2 dkdv{' atomic' * atomic}{' tma' * tma}": (
        FA2, "_bwd_dkdv_kernel", {**QKV, "DO": "*bf16", **ROWS, "DK": "*bf16", "DV": "*bf16",
                                  "DQ": "*fp32" if atomic else "*bf16", **SCALES},
        {**FA2_ARGS, "ATOMIC_DQ": atomic, "TMA": tma, "BLOCK_M": 64, "BLOCK_N": 128},
        {**TILES, "num_warps": 8}) for atomic in (False, True) for tma in (False, True)},
}


@pytest.mark.parametrize("arch", [90, 80])
def test_the_triton_kernels_compile_for_hopper_and_ampere(arch):
    cases = {name: case for name, case in {**CASES, **FA2_CASES}.items()
             if arch >= 89 or not name.startswith("float8") and "tma" not in name}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(cases), json.dumps([arch, 32])], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    sizes = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(sizes) == set(cases)
    assert all(size > 1000 for size in sizes.values()), sizes
