"""Shared fixtures; GPU-only tests are skipped where no CUDA device is visible."""

import os

import pytest
import torch

# Without a GPU, Triton kernels run in Triton's interpreter (read when kernels are defined).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "results.db"


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """‖a − ref‖ / ‖ref‖ in float64."""
    return ((a.double() - ref.double()).norm() / ref.double().norm()).item()
