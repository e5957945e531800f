"""A float8 SwiGLU tile and its transpose in one Triton kernel, two ways (Triton 3.6, H100):
mode 0 casts the tile and stores tl.trans of it; mode 4 loads the tile a second time in the
transposed order and stores that. Counts the bytes of the transposed copy that differ from the
tile's, and times each kernel (`triton.testing.do_bench`) at the MLP's 16k tokens.

python3 float8-transpose-probe.py
"""

import torch
import triton
import triton.language as tl

E4M3 = torch.float8_e4m3fn


@triton.jit
def swiglu_cast(GU, Y, YT, T, F, MODE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rows = (tl.program_id(0) * BM + tl.arange(0, BM)).to(tl.int64)
    cols = (tl.program_id(1) * BN + tl.arange(0, BN)).to(tl.int64)
    at = GU + rows[:, None] * (2 * F) + cols[None, :]
    g = tl.load(at).to(tl.float32)
    u = tl.load(at + F).to(tl.float32)
    y = tl.clamp(g * tl.sigmoid(g) * u * 30, -448.0, 448.0).to(Y.dtype.element_ty)
    tl.store(Y + rows[:, None] * F + cols[None, :], y)
    if MODE == 0:
        tl.store(YT + cols[:, None] * T + rows[None, :], tl.trans(y))
    else:
        at_t = GU + rows[None, :] * (2 * F) + cols[:, None]
        g_t = tl.load(at_t).to(tl.float32)
        u_t = tl.load(at_t + F).to(tl.float32)
        y_t = tl.clamp(g_t * tl.sigmoid(g_t) * u_t * 30, -448.0, 448.0)
        tl.store(YT + cols[:, None] * T + rows[None, :], y_t.to(YT.dtype.element_ty))


def main() -> None:
    for t, f in ((256, 256), (16384, 8192)):
        gu = torch.randn(t, 2 * f, device="cuda").bfloat16()
        for mode in (0, 4):
            for bm, bn, warps in ((64, 64, 4), (64, 64, 8), (128, 64, 8), (64, 128, 8), (32, 128, 4)):
                y = torch.zeros((t, f), dtype=torch.uint8, device="cuda").view(E4M3)
                yt = torch.zeros((f, t), dtype=torch.uint8, device="cuda").view(E4M3)

                def run(bm=bm, bn=bn, warps=warps, mode=mode, gu=gu, y=y, yt=yt, t=t, f=f) -> None:  # noqa: ANN001
                    swiglu_cast[(t // bm, f // bn)](gu, y, yt, t, f, MODE=mode, BM=bm, BN=bn,
                                                    num_warps=warps)

                run()
                bad = (yt.view(torch.uint8) != y.view(torch.uint8).t()).sum().item()
                ms = f" {triton.testing.do_bench(run):.3f} ms" if t > 1000 else ""
                print(t, f, "mode", mode, bm, bn, warps, "bad", bad, ms, flush=True)


if __name__ == "__main__":
    main()
