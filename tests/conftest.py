"""Shared test settings: fixed seeds, a private cache directory, and the GPU skip."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Keep calibrations written by tests out of the user's cache."""
    monkeypatch.setenv("POLYREC_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def rng() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA or ROCm GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
