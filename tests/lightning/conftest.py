"""Every test here runs on both PyTorch capture paths (native and Python)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def both_capture_paths(capture_path: str) -> str:
    return capture_path
