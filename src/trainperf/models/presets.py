"""Model size presets for the GPT-style LM (d_model, d_ff, layers, heads, and a vocabulary where the
preset defines one)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SizePreset:
    d_model: int
    d_ff: int
    n_layers: int
    n_heads: int
    vocab: int | None = None  # the preset's own vocabulary; None: the command's --vocab


PRESETS: dict[str, SizePreset] = {
    "tiny": SizePreset(64, 256, 2, 4),  # for the CPU and tests
    "small": SizePreset(768, 3072, 12, 12),
    "medium": SizePreset(1024, 4096, 24, 16),
    "large": SizePreset(1280, 5120, 36, 20),
    "xl": SizePreset(1600, 6400, 48, 25),
    "2.7B": SizePreset(2560, 10240, 32, 32),
    # the 8B-class model of the CS336 (2026) two-GPU training-step leaderboard
    "cs336-8b": SizePreset(4096, 11008, 34, 32, vocab=151_936),
}


def get_preset(name: str) -> SizePreset:
    """The preset called `name`; a ValueError naming the valid choices otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown size {name!r}; valid choices: {', '.join(PRESETS)}") from None
