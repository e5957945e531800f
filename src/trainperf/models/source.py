"""One place that turns a model name into a model, for every command that trains one.

Three ways to name a model:
  a preset       the GPT LM presets (models/presets.py), built by the workloads that own them
  hf:<hub id>    any architecture transformers' AutoModelForCausalLM.from_config builds, randomly
  config.json    initialised from its config (a hub id from the local cache; a config.json file or
  model folder   a model folder as they are): no weights, no token
  py:<module or file.py>:<factory>
                 the user's own nn.Module: `factory()` returns a model whose forward takes token
                 ids and returns logits, or an output with `.logits` (a transformers-style one)
What every workload needs of any of them: the model (`build`), its vocabulary (`vocab_of`), its
logits for a batch (`logits_of`) and its repeated blocks (`find_blocks`), which compile per layer,
checkpointing, FSDP2 units and the profiler's per-layer ranges act on.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainperf.core.errors import SpecError

OTHER_MODELS = "hf:<hub id>, a transformers config.json or model folder, or py:<module or file.py>:<factory>"


def is_model_source(name: str) -> bool:
    """Whether `name` names a model other than a preset: hf:, py:, a config.json or a folder."""
    try:
        return name.startswith(("hf:", "py:")) or name.endswith(".json") or Path(name).is_dir()
    except OSError:  # a name the file system cannot hold
        return False


@dataclass(frozen=True)
class ModelSource:
    """A model named by the user (not a preset): how to build it, checked before any work."""

    name: str
    layers: int | None = None  # a transformers config's first `layers` blocks (a part of a model too large)

    @property
    def kind(self) -> str:
        return "py" if self.name.startswith("py:") else "hf"

    def check(self) -> None:
        """SpecError, in one line, for a name that cannot give a model (nothing built yet)."""
        if self.kind == "py":
            if self.layers is not None:
                raise SpecError(f"--layers sets a transformers config's depth; --model {self.name} builds "
                                "as its factory does")
            self.factory()
        else:
            self.config()

    def config(self) -> Any:
        """The transformers config of an hf: name, a config.json or a model folder."""
        from trainperf.models.hf_llama import load_config

        target = self.name.removeprefix("hf:")
        if self.name.endswith(".json") and not Path(target).is_file():
            raise SpecError(f"--model {self.name!r}: no such file")
        try:
            return load_config(target, self.layers)
        except ValueError as exc:
            raise SpecError(str(exc)) from None

    def factory(self) -> Callable[[], nn.Module]:
        """The user's factory of a py: name."""
        where, sep, attr = self.name.removeprefix("py:").rpartition(":")
        if not sep or not where or not attr:
            raise SpecError(f"--model {self.name!r}: expected py:<module or file.py>:<factory>")
        module = _import(where, self.name)
        made = getattr(module, attr, None)
        if not callable(made):
            raise SpecError(f"--model {self.name!r}: {where} has no callable {attr!r}")
        return made

    def build(self, device: torch.device) -> nn.Module:
        """The model on `device` (fp32 weights, train mode), randomly initialised."""
        with torch.device(device):
            if self.kind == "py":
                model = self.factory()()
                if not isinstance(model, nn.Module):
                    raise SpecError(f"--model {self.name!r}: the factory returned a "
                                    f"{type(model).__name__}, not an nn.Module")
            else:
                from transformers import AutoModelForCausalLM

                model = AutoModelForCausalLM.from_config(self.config())
        return model.to(device=device, dtype=torch.float32).train()


def _import(where: str, name: str) -> Any:
    """The module at `where`: a file.py (its folder importable for its own imports), or a module."""
    try:
        if where.endswith(".py"):
            path = Path(where).resolve()
            if not path.is_file():
                raise SpecError(f"--model {name!r}: no such file {where!r}")
            spec = importlib.util.spec_from_file_location(f"trainperf_user_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            sys.path.insert(0, str(path.parent))
            try:
                spec.loader.exec_module(module)
            finally:
                sys.path.remove(str(path.parent))
            return module
        return importlib.import_module(where)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: any error is theirs to read
        raise SpecError(f"--model {name!r}: importing {where} failed: {type(exc).__name__}: {exc}") from None


def refuse_blocks_of_preset(name: str, blocks: str | None) -> None:
    """SpecError where --blocks is given for a preset: its blocks are known."""
    if blocks is not None:
        raise SpecError(f"--blocks names a model's blocks; {name} is a preset, whose blocks are known")


def vocab_of(model: nn.Module) -> int:
    """The vocabulary a model reads: its config's, a `vocab_size` attribute, or its first
    embedding's rows."""
    config = getattr(model, "config", None)
    for found in (getattr(config, "vocab_size", None), getattr(model, "vocab_size", None)):
        if isinstance(found, int) and found > 0:
            return found
    embedding = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    if embedding is None:
        raise SpecError(f"{type(model).__name__} has no config.vocab_size, vocab_size or nn.Embedding: "
                        "give the vocabulary (vocab=...)")
    return embedding.num_embeddings


def logits_of(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The logits of `model` for token ids: its output itself, its `.logits`, or its first element."""
    out = model(ids)
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if logits is None and isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        logits = out[0]
    if logits is None:
        raise SpecError(f"{type(model).__name__}'s forward returned a {type(out).__name__}: expected "
                        "logits, or an output with .logits")
    return logits


@dataclass(frozen=True)
class Blocks:
    """A model's repeated blocks: where they are and the modules."""

    path: str
    layers: nn.ModuleList

    def describe(self) -> str:
        return f"{self.path} ({len(self.layers)} x {type(self.layers[0]).__name__})"


def find_blocks(model: nn.Module, path: str | None = None) -> Blocks | None:
    """The repeated blocks: the ModuleList at `path`, or, found by itself, the ModuleList of modules
    of one type that holds the most parameters; None where there is none."""
    if path is not None:
        try:
            found = model.get_submodule(path)
        except AttributeError:
            raise SpecError(f"blocks {path!r}: {type(model).__name__} has no such submodule") from None
        if not isinstance(found, nn.ModuleList) or len(found) == 0:
            raise SpecError(f"blocks {path!r} is a {type(found).__name__}, not a non-empty ModuleList")
        return Blocks(path, found)
    lists = [(name, m) for name, m in model.named_modules()
             if isinstance(m, nn.ModuleList) and len(m) > 0 and len({type(c) for c in m}) == 1]
    if not lists:
        return None
    name, best = max(lists, key=lambda item: sum(p.numel() for p in item[1].parameters()))
    return Blocks(name, best) if sum(p.numel() for p in best.parameters()) > 0 else None
