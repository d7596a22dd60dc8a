"""Records the native capture names as what they are: ATen ops by their ATen name.

Autograd's kernels of ``detach`` and ``detach_`` record themselves a second
time under the bare op name, inside the dispatcher's ``aten::`` record of the
same op; Dynamo's ``Torch-Compiled Region`` records are frames, not operators
(``test_compile_regions.py`` covers those with a compiled model).
"""

from __future__ import annotations

import torch

import dc_torch
from dc_core.model.opnames import op_name
from dc_core.record.config import StepRange
from tests.torch.conftest import find, only_profile


def _detaching_steps(prof, steps):
    lin = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(lin.parameters(), lr=0.1)
    for _ in range(steps):
        h = lin(torch.randn(2, 4))
        kept = h.detach()
        kept.detach_()
        h.sum().backward()  # AccumulateGrad detaches each fresh gradient inside it
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        prof.step()


def test_regression_bare_detach_records_were_operators_of_their_own(tmp_path, capture_path):
    """``detach_`` (and ``detach``) came out of the native capture as ``detach_``,
    a region beside the ``aten::detach_`` that ran it, and inside AccumulateGrad
    as a node of its own under the line that called backward. Now: one
    ``aten::detach_`` per call, and autograd's own detaches inside AccumulateGrad."""
    with dc_torch.profile(
        logdir=str(tmp_path),
        steps=StepRange(start=1, count=3),
        cpu_sampling_hz=0,
        system_interval_ms=0,
    ) as prof:
        _detaching_steps(prof, 5)
    tree = only_profile(tmp_path).tree
    detaches = find(tree, lambda fs: fs[-1].kind == "operator" and op_name(fs[-1].name) == "detach")
    lines = sorted((tree.path_frames(n)[-2].line, tree.value(n, "count")) for n in detaches)
    first = _detaching_steps.__code__.co_firstlineno
    # h.detach(), kept.detach_(): once each per step
    assert lines == [
        (first + 5, 3),
        (first + 6, 3),
    ]
    assert all(tree.path_frames(n)[0].name == "forward" for n in detaches)
    if capture_path == "native":  # named as ATen names them, like every other ATen op
        assert sorted(tree.node_frame(n).name for n in detaches) == [
            "aten::detach",
            "aten::detach_",
        ]
