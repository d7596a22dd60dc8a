"""Optimizer and dataloader phases, hooked only while a window is open.

``Optimizer.step`` of every optimizer runs the global step hooks torch keeps
for profilers; ``zero_grad`` and ``DataLoader`` iteration are wrapped at the
class (and restored when the window closes), so no user object is touched.
"""

from __future__ import annotations

import functools
from typing import Any

from threading import get_ident

import torch
from torch.optim import optimizer as optimizer_mod
from torch.utils.data import dataloader as dataloader_mod


class PhaseHooks:
    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.handles: list[Any] = []
        self.patched: list[tuple[type, str, Any]] = []

    def install(self) -> None:
        self.handles = [
            optimizer_mod.register_optimizer_step_pre_hook(self._optimizer_begin),
            optimizer_mod.register_optimizer_step_post_hook(self._optimizer_end),
        ]
        self._patch(torch.optim.Optimizer, "zero_grad", "optimizer")
        self._patch(dataloader_mod._BaseDataLoaderIter, "__next__", "dataloader")

    def uninstall(self) -> None:
        handles, self.handles = self.handles, []
        for handle in handles:
            handle.remove()
        patched, self.patched = self.patched, []
        for cls, name, original in reversed(patched):
            setattr(cls, name, original)

    # --- optimizer.step: torch's global hooks -------------------------------
    def _optimizer_begin(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._begin("optimizer")

    def _optimizer_end(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._end()

    def _begin(self, name: str) -> None:
        a = self.adapter
        phase = None
        try:
            state = a.thread_state()
            if a.active and not (get_ident() in a.suspended):
                phase = a.session.phase(name)
                phase.__enter__()
            state.phases.append(phase)  # None too, so that _end pops what this call pushed
        except Exception as exc:  # noqa: BLE001 - the profiler never breaks training
            a.fail(exc, "phase")

    def _end(self) -> None:
        a = self.adapter
        try:
            state = a.thread_state()
            phase = state.phases.pop() if state.phases else None
            if phase is not None:
                phase.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001
            a.fail(exc, "phase")

    # --- wrapped methods ------------------------------------------------------
    def _patch(self, cls: type, name: str, phase: str) -> None:
        original = cls.__dict__[name]
        hooks = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            hooks._begin(phase)
            try:
                return original(*args, **kwargs)
            finally:
                hooks._end()

        setattr(cls, name, wrapper)
        self.patched.append((cls, name, original))
