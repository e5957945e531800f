"""Probe: the chunked loss's cross-entropy kernel (kernels/cross_entropy.py) made persistent, each
program looping over rows, on one [2048, 128256] bf16 logits block (Llama 3's vocabulary): one
program per row against one or two per SM, whose rows in flight (33 MB at one per SM) might keep a
row's second read in L2. usage: python3 ce-programs.py

The persistent variant below is the one that was tried in the kernel module and left out: no
candidate beat one program per row. Each candidate launches straight with its config (CUDA
events, 3 rounds of 20 calls, in place: the block becomes its gradient and is overwritten again,
the same work each call); the loss of the first call is checked against float64.
"""

import torch
import triton
import triton.language as tl

# (BLOCK, warps, programs per SM): 16 per SM is one program per row of a 2048-row block
CONFIGS = [triton.Config({"BLOCK": b, "PER_SM": p}, num_warps=w) for b, w, p in
           [(2048, 8, 16), (4096, 8, 16), (4096, 16, 16), (8192, 16, 16), (8192, 32, 16), (16384, 32, 16),
            (4096, 8, 1), (8192, 16, 1), (8192, 32, 1), (16384, 32, 1), (4096, 8, 2), (8192, 16, 2)]]


@triton.jit
def _ce_kernel(X, T, LOSS, stride, ROWS, V, scale, BLOCK: tl.constexpr, PER_SM: tl.constexpr):
    for row in range(tl.program_id(0).to(tl.int64), ROWS, tl.num_programs(0)):  # int64 offsets
        row_ptr = X + row * stride
        target = tl.load(T + row)
        m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
        s = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, V, BLOCK):  # online max and sum of exp, lane-wise
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            s = tl.where(m_new > float("-inf"), s * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
            m = m_new
        m_row = tl.max(m, 0)
        lse = m_row + tl.log(tl.sum(s * tl.exp(m - m_row), 0))
        x_target = tl.load(row_ptr + target).to(tl.float32)
        tl.store(LOSS + row, lse - x_target)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(row_ptr + cols, mask=cols < V, other=0.0).to(tl.float32)
            g = tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)
            tl.store(row_ptr + cols, (g * scale).to(X.dtype.element_ty), mask=cols < V)

rows, vocab = 2048, 128256
torch.manual_seed(0)
original = (3 * torch.randn(rows, vocab, device="cuda")).to(torch.bfloat16)
targets = torch.randint(0, vocab, (rows,), device="cuda")
x = original.double()
ref = torch.logsumexp(x, -1) - x.gather(1, targets[:, None]).squeeze(1)
sms = torch.cuda.get_device_properties(original.device).multi_processor_count


def launch(config, logits, loss) -> None:  # noqa: ANN001
    grid = (min(rows, sms * config.kwargs["PER_SM"]),)
    _ce_kernel[grid](logits, targets, loss, vocab, rows, vocab, 1.0 / rows, **config.all_kwargs())


for config in CONFIGS:
    logits, loss = original.clone(), torch.empty(rows, device="cuda")
    launch(config, logits, loss)
    err = ((loss.double() - ref).abs().max() / ref.abs().max()).item()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            launch(config, logits, loss)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 20)
    ms = sorted(times)[1]
    block, per_sm = config.kwargs['BLOCK'], config.kwargs['PER_SM']
    print(f"BLOCK {block:5d} warps {config.num_warps:2d} per SM {per_sm:2d}: "
          f"{ms:.3f} ms  "
          f"loss err {err:.1e}", flush=True)
