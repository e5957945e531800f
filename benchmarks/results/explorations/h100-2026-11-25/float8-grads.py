"""How far each float8 variant's gradients are from float32's, on the parity run's own weights.

The parity task (2 decoder layers of Llama-3.2-1B, 8 x 1024 tokens of the Markov language, AdamW
at 3e-4) trained in stock bf16; at the steps named, one batch's gradients of every parameter in
float32, in bf16, with torchao's float8 on the MLPs' Linears or on every decoder Linear, and with
trainperf's float8 MLP freshly calibrated (each cast scaled from its own amax). Per group of
parameters: the relative L2 error against float32's and the fraction of elements whose sign
differs from float32's (AdamW's first steps move each weight by about the sign of its gradient).

PYTHONPATH=src python3 benchmarks/results/explorations/h100-2026-11-25/float8-grads.py STEP...
"""

import copy
import sys

import torch
import torch.nn.functional as F

from trainperf.models import hf_llama, peers
from trainperf.workloads.parity import markov_batches

BATCH, SEQ, LR = 8, 1024, 3e-4


def loss_of(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=tokens[:, :-1]).logits
    return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())


def grads(model: torch.nn.Module, tokens: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = loss_of(model, tokens)
    loss.backward()
    out = {}
    for name, p in model.named_parameters():
        g = p.grad.float()
        if name.endswith("gate_up.weight"):  # trainperf's stacked [gate; up]
            gate, up = g.chunk(2)
            out[name.replace("gate_up", "gate_proj")] = gate
            out[name.replace("gate_up", "up_proj")] = up
        else:
            out[name.replace("._orig_mod", "")] = g
    return loss.item(), out


def group(name: str) -> str:
    for part in ("gate_proj", "up_proj", "down_proj", "q_proj", "k_proj", "v_proj", "o_proj",
                 "embed", "norm"):
        if part in name:
            return part
    return name


def compare(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> dict[str, str]:
    err: dict[str, list[float]] = {}
    for name, r in ref.items():
        g = got[name]
        sign = ((torch.sign(g) != torch.sign(r)) & (r != 0)).float().mean().item()
        rel = ((g - r).norm() / r.norm()).item()
        err.setdefault(group(name), []).append((rel, sign))
    return {k: "{:.3f}/{:.3f}".format(*map(max, zip(*v, strict=True))) for k, v in err.items()}


def torchao_mlps(model: torch.nn.Module) -> None:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    convert_to_float8_training(model, config=Float8LinearConfig(round_scales_to_power_of_2=True),
                               module_filter_fn=lambda m, fqn: ".mlp." in f".{fqn}.")


def main() -> None:
    steps = sorted(map(int, sys.argv[1:]))
    device = torch.device("cuda")
    torch.manual_seed(0)
    cfg = hf_llama.load_config("llama-3.2-1b", layers=2)
    model = hf_llama.build_model(cfg, torch.bfloat16, device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    batches = markov_batches(cfg.vocab_size, BATCH, SEQ, steps[-1] + 1)
    print("per group: worst relative L2 error / worst fraction of flipped signs, against float32")
    for step, tokens in enumerate(batches):
        tokens = tokens.to(device)
        if step in steps:
            ref_loss, ref = grads(copy.deepcopy(model).float(), tokens)
            variants = {"bf16": copy.deepcopy(model)}
            for name, make in (("torchao-mlp", torchao_mlps),
                               ("torchao-all", peers.apply_float8),
                               ("trainperf-mlp", hf_llama.float8_mlps)):
                variants[name] = copy.deepcopy(model)
                make(variants[name])
            print(f"step {step}: float32 loss {ref_loss:.4f}")
            for name, m in variants.items():
                loss, got = grads(m, tokens)
                print(f"  {name:14s} loss {loss:.4f}  " + "  ".join(f"{k} {v}" for k, v in
                                                               compare(ref, got).items()))
                del m
            variants.clear()
            torch.cuda.empty_cache()
        opt.zero_grad(set_to_none=True)
        loss_of(model, tokens).backward()
        opt.step()


if __name__ == "__main__":
    main()
