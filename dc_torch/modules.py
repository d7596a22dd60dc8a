"""Module context: global ``nn.Module`` forward hooks open a ``module`` scope.

The scope's frame is the module's dotted path from the outermost module called
on this thread (its root) with the class as detail, e.g. ``blocks.0.attn
(SelfAttention)``. The Python frames between the enclosing scope and the
module call are captured first, so module frames interleave with the lines
that called them, and the module's own forward lines nest below it.
"""

from __future__ import annotations

from typing import Any

from threading import get_ident

import torch
from torch.nn.modules import module as module_mod

_is_compiling = torch.compiler.is_compiling


class ModuleHooks:
    """Installs and removes the two global module hooks."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.handles: list[Any] = []

    def install(self) -> None:
        self.handles = [
            module_mod.register_module_forward_pre_hook(self.pre),
            module_mod.register_module_forward_hook(self.post, always_call=True),
        ]

    def uninstall(self) -> None:
        handles, self.handles = self.handles, []
        for handle in handles:
            handle.remove()

    def pre(self, module: Any, args: Any) -> None:
        # Under dynamo tracing this folds away: hooks add nothing to compiled graphs.
        if _is_compiling():
            return
        a = self.adapter
        if not a.active:
            return
        try:
            state = a.thread_state()
            if (get_ident() in a.suspended):
                return
            fid = a.frames.module(module, state.modules[0] if state.modules else module)
            c = a.collector
            frames = c.python_frames()
            frames.append(fid)
            c.enter(frames)
            state.ctx.append(state.ctx[-1] + tuple(frames))
            state.modules.append(module)
        except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
            a.fail(exc, "module")

    def post(self, module: Any, args: Any, output: Any) -> None:
        if _is_compiling():
            return
        a = self.adapter
        try:
            state = a.thread_state()
            if state.modules and state.modules[-1] is module:
                state.modules.pop()
                state.ctx.pop()
                if a.active:
                    a.collector.exit()
        except Exception as exc:  # noqa: BLE001
            a.fail(exc, "module")
