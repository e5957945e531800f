"""trainperf: measure and explain how fast a Transformer language model trains.

From Python: `trainperf.measure_step(model, ...)`, `trainperf.profile_step(model, ...)` and
`trainperf.to_frame(records)` (trainperf/api.py), loaded on first use so that `import trainperf`
stays light."""

from typing import Any

from trainperf.version import __version__

__all__ = ["__version__", "measure_step", "profile_step", "to_frame"]
API = ("measure_step", "profile_step", "to_frame")


def __getattr__(name: str) -> Any:
    if name in API:
        from trainperf import api

        return getattr(api, name)
    raise AttributeError(f"module 'trainperf' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names, loaded or not, so that a notebook's completion offers the API."""
    return sorted(__all__)
