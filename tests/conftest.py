"""Shared fixtures; GPU-only tests are skipped where no CUDA device is visible."""

import pytest
import torch


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
