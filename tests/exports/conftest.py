"""Profiles the export tests read: a real window of the demo workload (through
the real session and collector), and small literal ones."""

from __future__ import annotations

import pytest

from dc_core.demo.workload import train
from dc_core.store.logdir import read_profile
from dc_core.store.profile import Profile


@pytest.fixture(scope="session")
def demo_profile(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """Steps 1-2 of the pure-Python demo: forward, backward, dataloader and
    optimizer phases, operators under Python frames, CPU time, counts, samples."""
    (written,) = train(tmp_path_factory.mktemp("demo"), steps=4, window=(1, 2))
    profile = read_profile(written)
    assert {"forward", "backward", "optimizer"} <= {
        profile.tree.node_frame(k).name for k in profile.tree.children(0)
    }
    return profile
