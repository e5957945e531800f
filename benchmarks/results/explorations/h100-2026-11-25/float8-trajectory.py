"""A float8 variant trained on the parity task, its gradients checked against float32's at every
step of its own trajectory (float8-grads.py checks them on stock's weights only).

Per step: the variant's loss; per group of parameters, the relative L2 error of its gradient
against float32's at the same weights and batch, and the ratio <g, g32> / <g32, g32> (below 1:
the gradient is shrunk along float32's); for trainperf's MLP, each tensor's amax over the amax its
scale was taken from (above 1: values saturated).

PYTHONPATH=src python3 float8-trajectory.py VARIANT STEPS   (VARIANT: bf16, torchao-mlp,
torchao-all, trainperf, trainperf-dynamic; a trainperf one may end in -pow2: its scales rounded
down to powers of two, as the fp8 recipe has torchao do; -e4m3: gradients in e4m3 too; -exact:
no fast accumulation in the forward GEMMs). With WARMUP=N in the environment the learning rate
rises linearly over the first N steps.
"""

import os
import sys

import torch

from trainperf.kernels import float8_mlp as f8
from trainperf.models import hf_llama, peers

sys.path.insert(0, __file__.rsplit("/", 1)[0])
grads_probe = __import__("float8-grads")
BATCH, SEQ, LR = grads_probe.BATCH, grads_probe.SEQ, grads_probe.LR
ROLE_NAMES = ("x", "h", "dy", "dgu", "w_gu", "w_d")


def dynamic() -> None:
    """Every cast scaled from its own current amax (the scales probe's `dynamic`)."""
    calibrate = f8.ScaleState.next

    def each_from_its_own(self, role, dtype, current=None):  # noqa: ANN001, ANN202
        calibrate(self, role, dtype, current)
        self.calibrated[role] = False

    f8.ScaleState.next = each_from_its_own
    f8.HISTORY = 1


def pow2() -> None:
    """Each scale rounded down to a power of two."""
    scale_from = f8.ScaleState.next

    def rounded(self, role, dtype, current=None):  # noqa: ANN001, ANN202
        scale_from(self, role, dtype, current)
        self.scale[role] = torch.exp2(torch.floor(torch.log2(self.scale[role])))
        self.inv[role] = 1 / self.scale[role]

    f8.ScaleState.next = rounded


def load_into(ref: torch.nn.Module, model: torch.nn.Module) -> None:
    params = dict(ref.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            name = name.replace("._orig_mod", "")
            if name.endswith("gate_up.weight"):
                gate, up = p.chunk(2)
                params[name.replace("gate_up", "gate_proj")].copy_(gate)
                params[name.replace("gate_up", "up_proj")].copy_(up)
            else:
                params[name].copy_(p)


def ratio(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> dict[str, str]:
    out: dict[str, list[tuple[float, float]]] = {}
    for name, r in ref.items():
        g = got[name]
        rel = ((g - r).norm() / r.norm()).item()
        along = ((g * r).sum() / (r * r).sum()).item()
        out.setdefault(grads_probe.group(name), []).append((rel, along))
    return {k: f"{max(e for e, _ in v):.3f}/{min(a for _, a in v):.3f}" for k, v in out.items()}


def saturation(model: torch.nn.Module) -> str:
    worst = [0.0] * f8.ROLES
    for m in model.modules():
        if isinstance(m, f8.Float8SwiGLUMLP):
            for role, dtype in enumerate((f8.E4M3, f8.E4M3, f8.E5M2, f8.E5M2, f8.E4M3, f8.E4M3)):
                seen = (m.state.now[role] * m.state.scale[role] / f8.float8_max(dtype)).item()
                worst[role] = max(worst[role], seen)
    return " ".join(f"{n} {w:.2f}" for n, w in zip(ROLE_NAMES, worst, strict=True))


def main() -> None:
    variant, steps = sys.argv[1], int(sys.argv[2])
    if variant.startswith("trainperf-dynamic"):
        dynamic()
    if variant.endswith("-pow2"):
        pow2()
    if variant.endswith("-e4m3"):
        f8.E5M2 = f8.E4M3
    if variant.endswith("-exact"):
        mm = f8._mm
        f8._mm = lambda *args, fast=False: mm(*args)
    device = torch.device("cuda")
    torch.manual_seed(0)
    cfg = hf_llama.load_config("llama-3.2-1b", layers=2)
    model = hf_llama.build_model(cfg, torch.bfloat16, device)
    ref = hf_llama.build_model(cfg, torch.float32, device)
    if variant.startswith("trainperf"):
        hf_llama.float8_mlps(model)
    elif variant == "torchao-mlp":
        grads_probe.torchao_mlps(model)
    elif variant == "torchao-all":
        peers.apply_float8(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    warmup = int(os.environ.get("WARMUP", "0"))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / max(warmup, 1)))
    print(f"{variant}: per group, relative L2 error / ratio along float32's gradient")
    for step, tokens in enumerate(grads_probe.markov_batches(cfg.vocab_size, BATCH, SEQ, steps)):
        tokens = tokens.to(device)
        load_into(ref, model)
        ref_loss, ref_grads = grads_probe.grads(ref, tokens)
        loss, got = grads_probe.grads(model, tokens)
        line = f"step {step:3d} loss {loss:.4f} (float32 {ref_loss:.4f}) " + " ".join(
            f"{k} {v}" for k, v in ratio(ref_grads, got).items())
        if variant.startswith("trainperf"):
            line += " | amax/scale's " + saturation(model)
        print(line, flush=True)
        opt.step()
        sched.step()


if __name__ == "__main__":
    main()
