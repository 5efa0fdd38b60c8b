"""Shared test settings: fixed seeds, a private cache directory, torch's thread count kept, and the GPU skip."""

from __future__ import annotations

import sys

import pytest
import torch


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Keep calibrations written by tests out of the user's cache."""
    monkeypatch.setenv("POLYREC_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def _restore_threads():
    """A run with cpu_threads=1 (fast when other test workers share the cores) changes torch's process-wide
    thread count: each test gets the count back as it found it."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _fresh_embedding_selections():
    """Each test selects the embedding kernels' configs afresh: none remembered by an earlier test (whose
    selector or model constants a monkeypatch may have replaced) is reused, and none of its own outlives it."""
    from polyrec.kernels import tbe_select

    tbe_select.clear_cache()
    yield
    tbe_select.clear_cache()


@pytest.fixture
def force_gemm(monkeypatch):
    """``force_gemm(choice)``: every ``matmul`` without a config takes ``choice`` (a ``GemmChoice``), as
    if the selector had answered it; ``force_gemm(select=f)`` puts ``f`` in the selector's place.
    matmul's dispatch memo is forgotten before and after, so no answer of the real selector is reused
    and none of the forced ones outlives the test."""
    from polyrec.kernels import gemm, gemm_select

    def force(choice=None, *, select=None) -> None:
        gemm_select.DISPATCH.clear()
        monkeypatch.setattr(gemm, "select_gemm", select or (lambda *args, **kwargs: choice))

    yield force
    gemm_select.DISPATCH.clear()


@pytest.fixture
def rng() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def poisoned(monkeypatch):
    """torch.empty / empty_like of a float dtype start as NaN, so an element a kernel must write and does not
    shows."""
    for name in ("empty", "empty_like"):
        real = getattr(torch, name)

        def nan_fill(*args, _real=real, **kwargs):
            t = _real(*args, **kwargs)
            return t.fill_(float("nan")) if t.is_floating_point() else t

        monkeypatch.setattr(torch, name, nan_fill)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA or ROCm GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_catalog(monkeypatch):
    """The device catalog read again under this test's environment (it reads $POLYREC_DEVICE_DIR where first
    loaded), and again after it; the test's monkeypatch."""
    catalog_module = sys.modules["polyrec.hardware.catalog"]  # polyrec.hardware.catalog is also a function's name
    catalog_module.catalog.cache_clear()
    yield monkeypatch
    catalog_module.catalog.cache_clear()
