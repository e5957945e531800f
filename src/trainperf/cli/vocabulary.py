"""One vocabulary across commands: every option name with its one meaning, and the old names.

An option is declared with `option(flag, ...)`, so its help starts with the glossary's meaning; a
test walks the typer app and fails when a flag is missing here, or a meaning has two names. The
glossary of docs/options.md is `markdown_glossary()`, checked by a test too."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperCommand

# flag -> its meaning, the same in every command that has it
GLOSSARY: dict[str, str] = {
    "--model": "Model: a preset (GPT LM tiny ... 2.7B; Llama llama-3.2-1b, tiny); where a command takes "
               "any model, also hf:<hub id>, a transformers config.json or model folder, or "
               "py:<module or file.py>:<factory> (your own nn.Module).",
    "--blocks": "The module path of a model's repeated blocks (e.g. model.layers), where trainperf does not "
                "find them itself: what compile per layer, checkpointing, FSDP2 units and per-layer "
                "profile ranges act on.",
    "--scope": "Which ranks a collective spans: all; node (the ranks of each node: the links within a node); "
               "cross (one rank of each node, every such group at once: the links between nodes).",
    "--wide": "Every column in the console table (by default: the columns that tell this run's cases "
              "apart and the headline metrics, sized to the terminal); files keep every field.",
    "--batch": "Sequences per step (per rank under ddp).",
    "--batch-per-rank": "Sequences each rank trains per step: the global batch grows with the world size "
                        "(weak scaling).",
    "--seq": "Sequence length in tokens.",
    "--batch-seq": "Batch x sequence pairs, e.g. 1x4096,2x2048.",
    "--dtype": "Number format: fp32, bf16, fp16 (float32, bfloat16, float16 read too).",
    "--iters": "Timed repetitions: steps, calls or iterations.",
    "--warmup": "Untimed repetitions before the timed ones.",
    "--mode": "Which passes run: forward, backward, forward-backward, or train (with the "
              "optimizer step).",
    "--compile": "torch.compile: off, on (the whole model), layers (each decoder layer on its own), "
                 "layers-tuned (layers, with Inductor's coordinate-descent tuning).",
    "--cuda-graph": "on: the step's forward and backward captured once as a CUDA graph and replayed, "
                    "with no host launch work (FSDP2's hooks included); off: launched eagerly.",
    "--expandable-segments": "on: PyTorch's CUDA caching allocator grows its segments in place "
                             "(expandable_segments), so memory freed in one size is taken back in "
                             "another instead of the cache being freed and allocated again; off: "
                             "its fixed segments, PyTorch's default. Set per case, over "
                             "PYTORCH_CUDA_ALLOC_CONF.",
    "--attention": "Attention implementation(s) by name.",
    "--kernel": "Fused kernel(s) and their references by name, <part>-<impl>: norm-triton, loss-torch, ...",
    "--tokens": "Tokens per call: the rows of the kernel's input.",
    "--norm": "RMSNorm: torch, fused (F.rms_norm), triton (trainperf's), cudnn (cuDNN frontend).",
    "--rope": "Rotary embedding: torch, triton.",
    "--swiglu": "SwiGLU activation: torch, triton; for llama also quack (in the epilogues of quack's "
                "gate-and-up and down GEMMs).",
    "--loss": "Loss: torch (full logits), chunked (LM head + cross-entropy in chunks).",
    "--gemm": "Matrix products of the attention projections and the chunked loss's LM head: torch "
              "(cuBLAS), quack (quack's GEMM with the configuration trainperf knows tuned for the GPU, "
              "cuBLAS where it knows none).",
    "--kv-heads": "Grouped K/V heads into SDPA: native (enable_gqa), expanded (repeat_kv first), packed "
                  "(FA4: each K/V head's query heads as one sequence).",
    "--tf32": "TF32 matmuls for fp32: on, off.",
    "--vocab": "Vocabulary size.",
    "--d-model": "Model width (overrides the preset's).",
    "--d-ff": "Feed-forward width (overrides the preset's).",
    "--layers": "Decoder layers (overrides the model's).",
    "--heads": "Attention heads.",
    "--head-dim": "Head dimension.",
    "--causal": "Causal masking: on, off.",
    "--peak-tflops": "Peak TFLOP/s that MFU divides by (default: the known-GPU table).",
    "--sdpa-backend": "PyTorch SDPA backend(s): CUDNN_ATTENTION, EFFICIENT_ATTENTION, "
                      "FLASH_ATTENTION, MATH; or CUDNN_FE, cuDNN-frontend graphs without PyTorch's SDPA; "
                      "CUDNN_FP8, their float8 graphs; or FA4, FlashAttention 4.",
    "--baseline": "The SDPA backend that speed-ups are relative to.",
    "--optimizer": "Optimizer: adamw, adamw-fused, sgd, none; adamw-pretrain (Llama's betas 0.9 and 0.95, "
                   "gradients clipped to norm 1, warm-up over the first tenth of the steps).",
    "--inputs": "What the model is fed: embeds (random input embeddings), ids (token ids).",
    "--fast": "trainperf's fastest step: its best swaps and compile mode, and FlashAttention 4, "
              "quack's fused MLP and quack's tuned GEMMs where they run.",
    "--recipe": "Named setups, each a row of the same run: stock, compile, liger, liger-compile, fast, fp8, "
                "fp8-mlp, fp8-attention, fp8-rowwise, fp8-trainperf, fp8-trainperf-all, fp8-trainperf-head, "
                "fp8-trainperf-attn, fa4, liger-fa4.",
    "--train-steps": "Optimizer steps of a loss-parity run (untimed).",
    "--stock-seeds": "Stock's runs from other weights and batch orders of the same task: the band of its own "
                     "noise that a recipe's loss is judged against.",
    "--repeats": "Loss-parity runs of each recipe: the same training again, to see how far a curve "
                 "moves between runs.",
    "--draws": "Loss-parity draws of the task: each another language and its batches, to see whether "
               "a recipe keeps parity beyond one draw.",
    "--lr": "Learning rate.",
    "--jobs": "Processes that share the runs out, each on a GPU of its own (at most the GPUs visible; "
              "on the CPU they share it), the store measuring each run once.",
    "--library": "Kernel library patched into the model: none, liger (Liger Kernel).",
    "--float8": ("Float8 training: off, torchao (every decoder Linear, scales from each tensor's "
                 "amax; torchao-mlp, torchao-attention: the MLP's or the attention projections' alone; "
                 "torchao-rowwise: a scale per row), trainperf (the MLP, trainperf's kernels, scales from "
                 "earlier iterations' amax; trainperf-all: the MLP and the attention projections; "
                 "trainperf-head: those and the chunked loss's LM head; `shard`'s "
                 "trainperf: every decoder product, its trainperf-head the LM head's too)."),
    "--graph": "How the timed iterations launch: off (kernel by kernel), step (the whole iteration "
               "captured once as a CUDA graph and replayed; with FA4 or CUDNN_FE and input embeddings).",
    "--op": "Collectives.",
    "--bytes": "Message sizes: 4096, 64K, 1M, 1G (binary, as nccl-tests reads them; KB, MB, GB are "
               "decimal); MIN:MAX doubles from MIN to MAX.",
    "--timing": "How calls are timed: loop (back to back between two timestamps, as nccl-tests does), "
                "per-call (each alone behind a barrier: latency).",
    "--in-place": "Whether the collective writes its result into its input buffer: on, off.",
    "--reshard-after-forward": "FSDP2 frees each layer's gathered parameters after its forward (the last "
                               "layer's never): on, off.",
    "--prefetch": "FSDP2 units gathered ahead explicitly in forward and backward (0: its implicit "
                  "prefetching).",
    "--unit-layers": "Decoder layers FSDP2 gathers and reduces as one unit: fewer units, fewer of FSDP2's "
                     "host-side hooks a step.",
    "--rounds": "Alternating rounds: every case measured this many times, each round running every case "
                "once, so drift hits all alike.",
    "--link": "How the GPUs of one host talk under NCCL: auto (NCCL's choice: NVLink, peer to peer, shared "
              "memory), shm (through host memory, no peer to peer), socket (its socket transport alone, as "
              "hosts joined by Ethernet).",
    "--world-size": "Processes, one per GPU (or CPU process under gloo).",
    "--gpus": "GPU counts to predict a step for, comma-separated.",
    "--gpus-per-node": "GPUs in one node (NVLink within, the network between nodes).",
    "--inter-node": "The network between nodes, per GPU: 400Gb (bits a second) or 50GB (bytes).",
    "--gpu": "Which GPU's records: part of its name (H200, H100); default any.",
    "--dist-backend": "torch.distributed backend: nccl, gloo (default: nccl with GPUs, else gloo).",
    "--variant": "Gradient-sync variants.",
    "--reduce-dtype": "The gradients' dtype on the wire: fp32 (their own), bf16 (half the bytes; cast for "
                      "the reduction and back, as DDP's bf16 compression hook does).",
    "--bucket-mb": "Gradient bucket sizes in MB (bucketed and ddp variants).",
    "--shard": "How the model is split over the ranks: full (FSDP2), hybrid (HSDP: sharded within a "
               "host, replicated across hosts), none (plain data parallel).",
    "--checkpoint": "Activation checkpointing: none, full (every decoder layer), every-K (every K-th "
                    "layer), all-but-N (every layer but the last N), ops (selective: matrix products and "
                    "attention kept, the rest recomputed); full, every-K or all-but-N with +attn keeps the "
                    "attention's output in the checkpointed layers (full+attn: all but attention "
                    "recomputed).",
    "--offload": "FSDP2 CPU offload of parameters, gradients and optimizer state: off, on.",
    "--shard-optimizer": "ZeRO-1 sharded optimizer state: off, on.",
    "--phase": "How far a step runs: forward (activations only), step (forward, backward, optimizer).",
    "--rank": "The rank whose step is profiled (the others train beside it).",
    "--forward-only": "Profile the forward pass and the loss alone (no backward, no optimizer).",
    "--nsys": "Print the nsys command line for this profile and exit.",
    "--ranges-only": "Run with NVTX ranges and no profiler (for running under nsys).",
    "--out": "Folder for plots, CSV and JSON files.",
    "--results": "Folder that holds the suites' results folders.",
    "--part": "Parts of a suite to run.",
    "--file": "File the table is written to.",
    "--db": "SQLite results store.",
    "--device": "auto, cpu, cuda, cuda:N.",
    "--timeout": "Seconds a multi-GPU case may go without progress outside its timed steps (building, "
                 "compiling, warming up) before it is ended as an error; the process group's timeout too.",
    "--rerun": "Measure again cases already in the store.",
    "--quiet": "No progress bar (nor, off a terminal, its line per finished case).",
    "--verbose": "Show everything libraries print (warnings about their internals too); before the "
                 "command: trainperf --verbose llama ...",
    "--json": "Print JSON on stdout instead of a table.",
    "--format": "File format: csv, json, markdown.",
    "--workload": "Only records of this workload.",
    "--status": "Only records of this status: ok, oom, unsupported, error.",
    "--last": "Show at most this many records (the newest).",
    "--axis": "What the result sets are meant to differ in (not warned about).",
    "--version": "Print trainperf's version and exit.",
}

# Old flag -> new flag, per command ("step", "profile step"). The old names still work, with a
# one-line note; nothing in the project uses them.
_GPT_LM = {"--size": "--model", "--context": "--seq", "--precision": "--dtype"}
RENAMED: dict[str, dict[str, str]] = {
    "step": {**_GPT_LM, "--steps": "--iters"},
    "ddp": {**_GPT_LM, "--steps": "--iters", "--backend": "--dist-backend"},
    "profile step": {**_GPT_LM, "--steps": "--iters"},
    "memory step": _GPT_LM,
    "attention": {"--impl": "--attention", "--reps": "--iters"},
    "profile attention": {"--impl": "--attention", "--steps": "--iters"},
    "llama": {"--preset": "--model", "--config": "--model", "--backend": "--sdpa-backend",
              "--input": "--inputs"},
    "profile llama": {"--preset": "--model", "--backend": "--sdpa-backend", "--steps": "--iters"},
    "comm": {"--size": "--bytes", "--backend": "--dist-backend"},
    "export": {"--output": "--file"},
    "profile-compare": {"--csv": "--file"},
}

# Values with a second name: the long dtype names, and the attention modes' old short names.
DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
MODE_ALIASES = {"fwd": "forward", "bwd": "backward", "fwd+bwd": "forward-backward"}


def option(flag: str, default: Any, detail: str = "", *short: str, **kw: Any) -> Any:
    """A typer option named `flag`, its help the glossary's meaning followed by `detail`."""
    meaning = GLOSSARY[flag]
    return typer.Option(default, flag, *short, help=f"{meaning} {detail}".strip(), **kw)


def command_name(ctx: Any) -> str:
    """'profile step' for `trainperf profile step`: the command's path below the program."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(reversed(names))


def rename_old_flags(command: str, args: list[str]) -> list[str]:
    """`args` with the command's old flag names replaced by the new ones, a note on stderr for each."""
    renamed = RENAMED.get(command, {})
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        name, eq, value = arg.partition("=")
        if name in renamed:
            new = renamed[name]
            sys.stderr.write(f"note: {name} is the old name of {new}; it works for now\n")
            arg = new + eq + value
        out.append(arg)
    return out


class RenamedFlags(TyperCommand):
    """A command that still reads its options' old names."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rename_old_flags(command_name(ctx), args))


# The options most commands share, as `trainperf --help` lists them.
SHARED = ("--model", "--batch", "--seq", "--dtype", "--iters", "--warmup", "--out", "--db", "--device")


def help_epilog() -> str:
    """The shared part of the glossary, for the end of `trainperf --help`."""
    shared = "  ".join(f"{flag}: {GLOSSARY[flag].rstrip('.')}." for flag in SHARED)
    return (f"Every option means the same in every command that has it. {shared}  Old option names "
            "still work, with a note. The whole glossary: README.md.")


def markdown_glossary() -> str:
    """The glossary as the README's markdown table."""
    rows = [f"| `{flag}` | {meaning.replace('|', '/')} |" for flag, meaning in GLOSSARY.items()]
    return "\n".join(["| option | meaning in every command |", "|---|---|", *rows])
