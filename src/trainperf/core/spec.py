"""Turning CLI axes into sweeps: comma-list parsing and the cartesian product of axes."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from trainperf.core.errors import SpecError

T = TypeVar("T")

ON_OFF = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}


def parse_list(text: str, convert: Callable[[str], T], option: str,
               choices: Iterable[str] | None = None, aliases: Mapping[str, str] | None = None) -> list[T]:
    """'a,b,c' → [convert(a), …]; SpecError naming the option and the bad item otherwise.
    `aliases` maps second names of values to their names first."""
    items = [t.strip() for t in str(text).split(",")]
    items = [(aliases or {}).get(t, t) for t in items]
    if not any(items):
        raise SpecError(f"{option} needs at least one value")
    if not all(items):
        raise SpecError(f"{option}: empty item in {text!r}; separate values with single commas")
    repeated = next((t for i, t in enumerate(items) if t in items[:i]), None)
    if repeated is not None:
        raise SpecError(f"{option}: {repeated!r} is given twice in {text!r}")
    allowed = list(choices) if choices is not None else None
    out = []
    for item in items:
        if allowed is not None and item not in allowed:
            raise SpecError(f"{option}: unknown value {item!r}; valid choices: {', '.join(allowed)}")
        try:
            out.append(convert(item))
        except OutOfRange as exc:
            raise SpecError(f"{option}: {exc}") from None
        except (ValueError, KeyError):
            raise SpecError(f"{option}: cannot read {item!r}") from None
    return out


def parse_one(text: str, convert: Callable[[str], T], option: str, choices: Iterable[str] | None = None,
              aliases: Mapping[str, str] | None = None) -> T:
    """One value of an option that takes one: parse_list's checks, and no list."""
    values = parse_list(text, convert, option, choices, aliases)
    if len(values) != 1:
        raise SpecError(f"{option} takes one value, got {text!r}")
    return values[0]


MAX_INT = 2**31 - 1  # the largest count, size or index trainperf takes (a C int: what kernels index with)


class OutOfRange(ValueError):
    """A number read whole, outside the range its option takes; its text says the range."""


def ascii_int(text: str) -> int:
    """An integer written in ASCII digits (int() reads '１' and '1_000' too); ValueError otherwise."""
    if not re.fullmatch(r"[+-]?[0-9]+", text.strip()):
        raise ValueError(text)
    return int(text)


def positive_int(text: str) -> int:
    value = ascii_int(text)
    if not 0 < value <= MAX_INT:
        raise OutOfRange(f"{text.strip()} is not an integer from 1 to {MAX_INT:,}")
    return value


def on_off(text: str) -> bool:
    return ON_OFF[text.lower()]


def sweep(**axes: list[Any]) -> list[dict[str, Any]]:
    """Every combination of the axes, the first axis varying slowest."""
    names = list(axes)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes.values())]


def check_choice(option: str, value: Any, choices: Iterable[Any]) -> None:
    """SpecError 'unknown --<option> <value>; valid choices: …' unless value is one of choices.
    `option` is the flag, or a spec field (`kv_heads` reads as `--kv-heads`)."""
    allowed = list(choices)
    if value not in allowed:
        flag = option if option.startswith("--") else "--" + option.replace("_", "-")
        raise SpecError(f"unknown {flag} {value!r}; valid choices: {', '.join(map(str, allowed))}")


def check_non_negative(spec: Any, *fields: str) -> None:
    """SpecError '--<field> must be >= 0' for the first field of spec that is negative."""
    for name in fields:
        if getattr(spec, name) < 0:
            raise SpecError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(spec, name)}")


def check_positive(spec: Any, *fields: str) -> None:
    """SpecError '--<field> must be positive' for the first field of spec that is not > 0."""
    for name in fields:
        if getattr(spec, name) <= 0:
            raise SpecError(f"--{name.replace('_', '-')} must be positive, got {getattr(spec, name)}")
