"""Shared test setup: GPU tests skip with a reason where no NVIDIA GPU is attached."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_absent_reason() -> str | None:
    """None when an NVIDIA GPU is attached, else why not (checked through NVML, no CUDA context)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception as error:  # no driver, no library
        return f"no NVIDIA GPU: NVML unavailable ({type(error).__name__})"
    return None if count else "no NVIDIA GPU: NVML reports 0 devices"


def pytest_collection_modifyitems(config, items):
    reason = gpu_absent_reason()
    if reason is None:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory, monkeypatch):
    """Keep the cubin cache and the default database out of the user's home."""
    root = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("AUTOTUNE_CACHE", str(root / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(root / "data"))
