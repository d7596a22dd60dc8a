"""The tiny GPT demo writes a profile with its lines, modules and backward."""

from __future__ import annotations

from dc_core.model.opnames import op_name
from dc_torch.demo import run_demo
from tests.torch.conftest import find, only_profile


def test_demo_writes_forward_and_backward_per_line_and_module(tmp_path):
    paths = run_demo(str(tmp_path), steps=4, cpu_sampling_hz=0, system_interval_ms=0)
    assert len(paths) == 1 and paths[0].exists()
    profile = only_profile(tmp_path)
    assert profile.steps == (2, 4)
    tree = profile.tree
    forward = find(
        tree,
        lambda fs: fs[0].name == "forward" and op_name(fs[-1].name) == op_name("torch.softmax"),
    )
    assert len(forward) == 4  # one per block
    path = tree.path_frames(forward[0])
    assert ("blocks.0.attn", "SelfAttention") in [
        (f.name, f.detail) for f in path if f.kind == "module"
    ]
    assert path[-2].name == "attention" and path[-2].file.endswith("dc_torch/demo.py")
    assert all(tree.value(n, "count") == 2 for n in forward)
    backward = find(
        tree,
        lambda fs: fs[0].name == "backward" and op_name(fs[-1].name) == op_name("torch.softmax"),
    )
    assert len(backward) == 4 and all(tree.node_frame(n).backward for n in backward)
