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
from collections.abc import Sequence
from typing import Any

from dc_core.collect.collector import KIND_MODULE, KIND_PYTHON
from dc_torch.adapter import TORCH_DIR

#: ``(kind, name, file, line, detail)``, the arguments of ``session.frame``.
Frame = tuple[int, str, str, int, str]

_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + "dc_"


def source_of(node: Any) -> list[Frame]:
    """Frames an FX node came from: its modules (outermost first, named by their
    path from the module the compiled frame got, which is left out unless
    called itself, then named by its class as an eager root is), then the
    user's lines, torch's own left out."""
    return module_frames(node) + python_frames(node.meta.get("stack_trace") or "")


def module_frames(node: Any) -> list[Frame]:
    """The node's ``nn_module_stack`` (or, in a backward graph, the forward's) as frames."""
    meta = node.meta
    stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack") or {}
    frames: list[Frame] = []
    for path, cls in list(stack.values()):
        kind = getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1])
        frames.append((KIND_MODULE, module_path(str(path)) or kind, "", 0, kind))
    return frames


# Dynamo's source names: the compiled frame's local or global (``L['self']``,
# ``L['s']``, ``G['model']``, a bare name in older torch), then attributes
# (``.up``; ``getattr(..., '0')`` when not an identifier), items (``[0]``,
# ``['a']``) and, before torch 2.5, ``._modules['up']`` for each submodule.
_ROOT_RE = re.compile(r"""(?:getattr\()*(?:[LG]\[(['"]).*?\1\]|[A-Za-z_]\w*)""")
_MEMBER_RE = re.compile(r"""\.(\w+)|\[(['"])(.*?)\2\]|\[(-?\d+)\]|,\s*(['"])(.*?)\5\)""")
_CONTAINERS = ("_modules", "_parameters", "_buffers")


def module_path(source: str) -> str:
    """A module's dotted path from the module the compiled frame got (what its
    ``named_modules()`` calls it), from dynamo's source name: ``L['self'].blocks.0``,
    ``L['s'].up`` (a helper's argument) and ``L['self']._modules['up']`` give
    ``blocks.0``, ``up`` and ``up``; the root itself gives ``""``. A name not read
    this way is returned as it is."""
    root = _ROOT_RE.match(source)
    if root is None:
        return source
    names: list[str] = []
    at = root.end()
    while at < len(source):
        member = _MEMBER_RE.match(source, at)
        if member is None:
            return source
        names.append(next(g for g in member.group(1, 3, 4, 6) if g is not None))
        at = member.end()
    return ".".join(n for i, n in enumerate(names) if not (n in _CONTAINERS and i + 1 < len(names)))


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
