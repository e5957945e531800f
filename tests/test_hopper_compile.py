"""The Triton kernels of the fastest step compile for Hopper (sm_90) here, without a GPU.

The CPU tests run Triton kernels in its interpreter, which executes them as Python: it checks the
numerics but not that Triton's compiler takes the kernel (a construct the interpreter runs, the
compiler may refuse). Triton's compiler and its ptxas need no GPU, so each kernel is compiled to
sm_90 machine code with the Triton installed here, for the argument types the step gives it. The
compiles run in a process of their own: the interpreter, on in this one, patches Triton's
language objects in ways its compiler does not survive.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

COMPILE = """
import json, sys
import triton
from importlib import import_module
from triton.backends.compiler import GPUTarget
from triton.runtime.jit import JITFunction

out = {}
for name, (module, kernel, signature, constexprs, warps) in json.loads(sys.argv[1]).items():
    fn = getattr(import_module(module), kernel)
    while not isinstance(fn, JITFunction):  # through the autotuner to the jitted function
        fn = fn.fn
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    source = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 64), options={"num_warps": warps})
    out[name] = len(compiled.asm["cubin"])
print(json.dumps(out))
"""

CE = {"X": "*bf16", "T": "*i64", "LOSS": "*fp32", "stride": "i32", "V": "i32", "scale": "fp32"}
CASES = {  # name: (module, kernel, signature, constexprs, warps), as the fastest step launches them
    **{f"scale {t}": ("trainperf.kernels.grad_scale", "_scale_kernel", {"X": t, "S": "*fp32", "N": "i32"},
                      {"BLOCK": 4096}, 8) for t in ("*bf16", "*fp16", "*fp32")},
    **{f"cross-entropy {b}x{w}": ("trainperf.kernels.cross_entropy", "_ce_kernel", CE, {"BLOCK": b}, w)
       for b, w in ((2048, 8), (16384, 32))},
}


def test_the_fastest_steps_triton_kernels_compile_for_hopper():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(CASES)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    sizes = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(sizes) == set(CASES)
    assert all(size > 1000 for size in sizes.values()), sizes
