"""Stored records from older trainperf versions: their spec keys and values in today's names.

A store holds every record it was ever given; reading one must give today's spec, and resuming a
sweep must find an old case under today's case key. `upgrade_spec` does both, for any record."""

from __future__ import annotations

from typing import Any

_GPT_LM = {"size": "model", "context": "seq", "precision": "dtype", "steps": "iters"}
RENAMED_KEYS: dict[str, dict[str, str]] = {
    "step": {**_GPT_LM, "n_layers": "layers", "n_heads": "heads"},
    "ddp": {**_GPT_LM, "backend": "dist_backend"},
    "attention": {"impl": "attention", "reps": "iters"},
    "llama": {"backend": "sdpa_backend"},
    "comm": {"size_bytes": "bytes", "backend": "dist_backend"},
}
# Fields added to a spec later, with the value every record without them was measured with.
ADDED_FIELDS: dict[str, dict[str, Any]] = {"llama": {"library": "none", "float8": "off"},
                                           "attention": {"compile": False}, "parity": {"seed": 0},
                                           "ddp": {"link": "auto", "round": 1, "reduce_dtype": "fp32"},
                                           "comm": {"link": "auto"},
                                           "shard": {"reshard_after_forward": True, "prefetch": 0,
                                                     "unit_layers": 1, "reduce_dtype": "fp32",
                                                     "cuda_graph": False, "expandable_segments": False}}
RENAMED_VALUES: dict[str, dict[str, dict[Any, Any]]] = {
    "attention": {"mode": {"fwd": "forward", "bwd": "backward", "fwd+bwd": "forward-backward"}},
    "comm": {"dtype": {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}},
}


def upgrade_spec(workload: str, spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` with old keys and values renamed; a spec in today's names comes back equal."""
    renamed = RENAMED_KEYS.get(workload, {})
    out = {renamed.get(k, k): v for k, v in spec.items()}
    for key, values in RENAMED_VALUES.get(workload, {}).items():
        if key in out:
            out[key] = values.get(out[key], out[key])
    for key, value in ADDED_FIELDS.get(workload, {}).items():
        out.setdefault(key, value)
    if workload == "comm" and "timing" not in out:  # before loop timing and in-place variants
        loop = out.get("op") == "all_reduce_loop"
        out.update(op="all_reduce" if loop else out["op"], timing="loop" if loop else "per-call")
        out.setdefault("in_place", out["op"] in ("all_reduce", "broadcast"))
    if workload == "llama" and "preset" in out:  # preset, config and hub id became one --model
        preset, config, hub = out.pop("preset"), out.pop("config", None), out.pop("model", None)
        out["model"] = hub or config or preset
    return out
