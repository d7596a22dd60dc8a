"""Fixtures for the PyTorch adapter tests: a one-profile loader and path helpers."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import torch

from dc_core.store.logdir import load_profiles

requires_cuda = pytest.mark.requires_cuda  # skipped without a device by tests/conftest.py


@pytest.fixture(autouse=True)
def both_capture_paths(capture_path):
    """Every test here runs on the native and the Python capture path."""
    return capture_path


@pytest.fixture(autouse=True)
def nothing_left_hooked():
    """After every test: no torch function mode, dispatch mode, global hook or
    RecordFunction callback of ours remains."""
    yield
    from dc_torch.native import load

    assert load()[0] is None or not load()[0].active()
    from torch.nn.modules import module as module_mod
    from torch.optim import optimizer as optimizer_mod

    assert torch._C._len_torch_function_stack() == 0
    assert not module_mod._global_forward_pre_hooks and not module_mod._global_forward_hooks
    assert (
        not optimizer_mod._global_optimizer_pre_hooks
        and not optimizer_mod._global_optimizer_post_hooks
    )


def only_profile(logdir):
    profiles, errors = load_profiles(logdir)
    assert not errors
    assert len(profiles) == 1, [p.steps for p in profiles]
    return profiles[0]


def labelled_paths(tree):
    """``{node: [frame, ...]}`` for every node, frames from the phase down."""
    return {node: tree.path_frames(node) for node in range(1, len(tree))}


def find(tree, predicate):
    """Nodes whose path (list of frames, phase first) satisfies ``predicate``."""
    return [node for node, frames in labelled_paths(tree).items() if predicate(frames)]
