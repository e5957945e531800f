"""The Record: one measured (or failed) case, with its spec, numbers and environment."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import datetime, timezone
from typing import Any

STATUSES = ("ok", "oom", "unsupported", "error")


def case_key(workload: str, spec: dict[str, Any], device_name: str | None) -> str:
    """A stable id for 'this case on this kind of device': what resume and dedup key on."""
    blob = json.dumps({"w": workload, "s": spec, "d": device_name}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def case_key_for(workload: str, spec: Any, env: dict[str, Any]) -> str:
    """The case key of `spec` measured in `env` (on its GPU model, or on the CPU)."""
    return case_key(workload, spec_dict(spec), env.get("gpu_name") or env.get("device"))


def spec_dict(spec: Any) -> dict[str, Any]:
    """A spec dataclass (or mapping) as a plain JSON-able dict."""
    return asdict(spec) if is_dataclass(spec) else dict(spec)


@dataclass
class Record:
    """What the store keeps for one case. `metrics` is flat: name -> number (or short string)."""

    workload: str
    spec: dict[str, Any]
    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    env: dict[str, Any] = field(default_factory=dict)
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    run_id: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    @property
    def key(self) -> str:
        return case_key_for(self.workload, self.spec, self.env)
