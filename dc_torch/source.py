"""Where an FX node came from: its module frames and the user's lines.

Dynamo records on every node the modules it was called under
(``nn_module_stack``; after AOTAutograd, backward nodes carry the forward's
as ``fwd_nn_module_stack``) and the user's Python stack (``stack_trace``).
Both the compiled region's graph operations and Inductor's kernels are
placed under these frames, so they share nodes in the tree.
"""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

from dc_core.collector import KIND_MODULE, KIND_PYTHON

from .adapter import TORCH_DIR

#: ``(kind, name, file, line, detail)``, the arguments of ``session.frame``.
Frame = tuple[int, str, str, int, str]

_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + "dc_"


def source_of(node: Any) -> list[Frame]:
    """Frames an FX node came from: its modules (outermost first, the root left
    out), then the user's lines, torch's own left out."""
    return module_frames(node) + python_frames(node.meta.get("stack_trace") or "")


def module_frames(node: Any) -> list[Frame]:
    """The node's ``nn_module_stack`` (or, in a backward graph, the forward's) as frames."""
    meta = node.meta
    stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack") or {}
    frames: list[Frame] = []
    for path, cls in list(stack.values()):
        name = re.sub(r"^L\['self'\]\.?", "", str(path)).replace("._modules['", ".").replace("']", "")
        frames.append((KIND_MODULE, name or "self", "", 0, getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1])))
    return frames


def python_frames(stack_trace: str) -> list[Frame]:
    """The user's frames in a formatted stack trace, outermost first."""
    return [
        (KIND_PYTHON, func, file, int(line), "")
        for file, line, func in _FRAME_RE.findall(stack_trace)
        if not file.startswith(TORCH_DIR) and not _own_file(file)
    ]


def common_prefix(paths: Sequence[Sequence[Frame]]) -> list[Frame]:
    """The frames all ``paths`` start with (a fused kernel's place when its
    sources differ: the deepest context they share)."""
    if not paths:
        return []
    prefix = list(paths[0])
    for path in paths[1:]:
        n = 0
        while n < len(prefix) and n < len(path) and prefix[n] == path[n]:
            n += 1
        del prefix[n:]
    return prefix


def _own_file(file: str) -> bool:
    """The profiler's own hooks, which dynamo traced through (demo workloads are user code)."""
    return file.startswith(_OWN) and "demo" not in os.path.basename(file)
