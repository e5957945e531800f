"""Probe: the chunked loss's logits block size and its cross-entropy kernel's second-pass order,
alone and inside the fastest step. usage: python3 loss-chunks.py DEADLINE_EPOCH SHAPE...

It ran at commit 11002b3, whose cross-entropy kernel walked its second pass backwards; the
repository's kernel walks it forwards again, so a rerun needs that commit. First the kernel on one
[2048, 128256] bf16 block, its second pass forwards (`_ce_forwards` below) against backwards (the
repository's at 11002b3), each block width, in alternating rounds. Then per shape the
`fast` step captured as a CUDA graph (as the suite runs it) with each variant of the loss, in
three alternating rounds of 10 replays: CUDA-event time, energy, clock and power (GpuMonitor),
and the peak memory of the capture.
"""

import functools
import gc
import sys
import time

import torch
import triton
import triton.language as tl

from trainperf.core.gpu_monitor import GpuMonitor
from trainperf.kernels import chunked_loss, cross_entropy
from trainperf.workloads import llama_sdpa
from trainperf.workloads.step_graph import GraphedIteration

VOCAB = 128256


@triton.jit
def _ce_forwards(X, T, LOSS, stride, V, scale, BLOCK: tl.constexpr):
    """The kernel as it was: both passes walk the row forwards."""
    row_ptr = X + tl.program_id(0).to(tl.int64) * stride
    target = tl.load(T + tl.program_id(0))
    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = tl.where(m_new > float("-inf"), s * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
        m = m_new
    m_row = tl.max(m, 0)
    lse = m_row + tl.log(tl.sum(s * tl.exp(m - m_row), 0))
    x_target = tl.load(row_ptr + target).to(tl.float32)
    tl.store(LOSS + tl.program_id(0), lse - x_target)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row_ptr + cols, mask=cols < V, other=0.0).to(tl.float32)
        g = tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)
        tl.store(row_ptr + cols, (g * scale).to(X.dtype.element_ty), mask=cols < V)


def launch(kernel, logits, targets, block, warps):  # noqa: ANN001, ANN201
    rows, vocab = logits.shape
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device)
    kernel[(rows,)](logits, targets, loss, logits.stride(0), vocab, 1.0 / rows, BLOCK=block, num_warps=warps)
    return loss


def forwards_grad_(logits, targets, scale):  # noqa: ANN001, ANN201
    """cross_entropy_grad_ with the forwards kernel at the block the tuner picked before (16384, 32)."""
    loss = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
    _ce_forwards[(logits.shape[0],)](logits, targets, loss, logits.stride(0), logits.shape[1], scale,
                                     BLOCK=16384, num_warps=32)
    return loss


def events(fn, n: int) -> float:  # noqa: ANN001
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def kernel_alone() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2048, VOCAB, device="cuda", dtype=torch.bfloat16) * 3
    targets = torch.randint(0, VOCAB, (2048,), device="cuda")
    ref = logits.clone()
    cases = [(name, kernel, b, w) for b, w in ((8192, 16), (8192, 32), (16384, 32))
             for name, kernel in (("forwards", _ce_forwards), ("backwards", cross_entropy._ce_kernel.fn))]
    grads = {}
    for name, kernel, b, w in cases:  # compile, and check both write the same gradient
        logits.copy_(ref)
        launch(kernel, logits, targets, b, w)
        grads[name] = logits.clone()
    same = torch.equal(grads["forwards"], grads["backwards"])
    print(f"kernel alone: backwards == forwards bit for bit: {same}", flush=True)
    times = {c[:1] + c[2:]: [] for c in cases}
    for _ in range(5):
        for name, kernel, b, w in cases:
            times[(name, b, w)].append(events(functools.partial(launch, kernel, logits, targets, b, w), 20))
    for (name, b, w), ms in times.items():
        print(f"  {name:9s} BLOCK {b:5d} warps {w:2d}: {min(ms):.3f} ms min, {sum(ms) / len(ms):.3f} ms mean "
              f"({2048 * VOCAB * 2 * 2 / min(ms) / 1e9:.2f} TB/s for one read and one write)", flush=True)


def block(run, n: int = 10) -> dict:  # noqa: ANN001
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with GpuMonitor(torch.device("cuda")) as monitor:
        start.record()
        for _ in range(n):
            run()
        end.record()
        torch.cuda.synchronize()
    m = monitor.metrics()
    return {"s": start.elapsed_time(end) / 1e3 / n, "j": m.get("energy_j", float("nan")) / n,
            "mhz": m.get("sm_clock_mhz"), "w": m.get("power_w")}


VARIANTS = {  # name: (rows per chunk, None for every row in one; the forwards kernel)
    "2048-forwards": (2048, True),
    "2048": (2048, False),
    "4096": (4096, False),
    "8192": (8192, False),
    "one-chunk": (None, False),
}


def in_step(shape: str, deadline: float) -> None:
    batch, seq = map(int, shape.split("x"))
    spec = llama_sdpa.setup_spec(llama_sdpa.recipe_setup("fast", "cuda", replayed=False), "CUDNN_ATTENTION",
                                 batch=batch, seq=seq)
    t0 = time.time()
    step = llama_sdpa.LlamaStep(spec, torch.device("cuda"))
    llama_sdpa.choose_kv_mode(step, spec.sdpa_backend)
    for _ in range(3):
        step()
    print(f"{shape} {spec.label()}: built in {time.time() - t0:.0f} s", flush=True)
    results = {name: [] for name in VARIANTS}
    peaks = {}
    original = cross_entropy.cross_entropy_grad_
    for rnd in range(3):
        for name, (rows, forwards) in VARIANTS.items():
            if time.time() > deadline:
                print("deadline reached", flush=True)
                break
            cross_entropy.cross_entropy_grad_ = forwards_grad_ if forwards else original
            step.hidden_loss = functools.partial(chunked_loss.chunked_lm_loss, chunk=rows or batch * seq)
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            graphed = GraphedIteration(step)
            peaks[name] = torch.cuda.max_memory_allocated() / 2**30
            graphed()
            r = block(graphed)
            results[name].append(r)
            print(f"  round {rnd} {name:14s}: {r['s']:.4f} s/iter, {r['j']:.1f} J/iter, {r['mhz']} MHz, "
                  f"{r['w']} W, peak {peaks[name]:.2f} GiB", flush=True)
            del graphed
    cross_entropy.cross_entropy_grad_ = original
    base = min(r["s"] for r in results["2048-forwards"]) if results["2048-forwards"] else float("nan")
    for name, rs in results.items():
        if rs:
            best, mean = min(r["s"] for r in rs), sum(r["s"] for r in rs) / len(rs)
            print(f"{shape} {name:14s}: best {best:.4f} s/iter, mean {mean:.4f}, "
                  f"{base / best:.4f}x over 2048-forwards, peak {peaks[name]:.2f} GiB", flush=True)
    step.close()


def main() -> None:
    deadline = float(sys.argv[1])
    kernel_alone()
    for shape in sys.argv[2:]:
        if time.time() > deadline - 60:
            print("deadline: skipping", shape, flush=True)
            break
        in_step(shape, deadline)
        gc.collect()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
