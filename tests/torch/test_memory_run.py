"""Memory by context on a script run unchanged: ``deepcontext run --memory``
on examples/train.py, whose steps end at the optimizer's update (so the window
opens inside an optimizer step's hooks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dc_core.store.logdir import load_profiles
from dc_torch.native import load

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def both_capture_paths():
    """Memory is read on the native capture path."""
    if load()[0] is None:
        if os.environ.get("CI") == "true":
            pytest.fail("native capture unavailable: " + load()[1])
        pytest.skip("native capture unavailable: " + load()[1])


def test_deepcontext_run_memory_on_an_unchanged_script(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dc_core",
            "run",
            "--memory",
            "--steps",
            "5:3",
            "--no-report",
            "--logdir",
            str(tmp_path),
            str(ROOT / "examples" / "train.py"),
            "--steps",
            "12",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "Memory block of unknown size" not in done.stderr  # the allocator's log stays quiet
    (profile,), errors = load_profiles(tmp_path)
    assert not errors and profile.memory_missing == []
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from train import TinyLM
    finally:
        sys.path.remove(str(ROOT / "examples"))
    model = TinyLM()
    params = sum(p.numel() for p in model.parameters()) * 4
    buffers = sum(b.numel() for b in model.buffers()) * 4
    tree = profile.tree
    # parameters (and the causal mask, a buffer), AdamW's two moments per parameter
    assert abs(tree.total("peak_live_bytes.parameter") - (params + buffers)) <= 0.01 * params
    assert abs(tree.total("peak_live_bytes.optimizer_state") - 2 * params) <= 0.01 * params
    # billed to the module that holds them, under the forward phase (not to the phase
    # alone: the window opens in an update, before any module of it is named)
    head = [
        n for n in range(len(tree)) if [f.name for f in tree.path_frames(n)] == ["forward", "head"]
    ]
    assert [tree.value(n, "peak_live_bytes.parameter") for n in head] == [(128 * 256 + 256) * 4]
    assert tree.value(tree.find("forward"), "peak_live_bytes.parameter") == 0
    (memory,) = profile.memory
    assert memory.peak_step in (5, 6, 7) and memory.peak_phase in (
        "forward",
        "backward",
        "optimizer",
    )
    assert memory.peak_bytes == tree.total("peak_live_bytes")
