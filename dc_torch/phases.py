"""Optimizer and dataloader phases, hooked only while a window is open.

``Optimizer.step`` of every optimizer runs the global step hooks torch keeps
for profilers; ``zero_grad`` and ``DataLoader`` iteration are wrapped at the
class (and restored when the window closes), so no user object is touched.

Torch's own optimizers get a Python frame of their step under the calling
line (``adam.py:214 AdamW.step``, named by the class the user built): their
code is skipped in captures, and without it the update's operators would sit
directly under the line that called ``step`` (or ``trainer.fit``), with two
optimizers indistinguishable.
"""

from __future__ import annotations

import functools
import inspect
import os
from threading import get_ident
from typing import TYPE_CHECKING, Any

import torch
from torch.optim import optimizer as optimizer_mod
from torch.utils.data import dataloader as dataloader_mod

from dc_core.collect.collector import KIND_PYTHON

if TYPE_CHECKING:
    from dc_torch.hub import Hub

_OPTIM_DIR = os.path.dirname(torch.optim.__file__) + os.sep  # where torch's optimizers live


class PhaseHooks:
    """Installs and removes the optimizer step hooks and the phase wrappers."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.handles: list[Any] = []
        self.patched: list[tuple[type, str, Any]] = []
        self.steps: dict[type, tuple[str, str, int] | None] = {}  # optimizer class -> its step's frame

    def install(self) -> None:
        self.handles = [
            optimizer_mod.register_optimizer_step_pre_hook(self._optimizer_begin),
            optimizer_mod.register_optimizer_step_post_hook(self._optimizer_end),
        ]
        self._patch(torch.optim.Optimizer, "zero_grad", "optimizer")
        self._patch(dataloader_mod._BaseDataLoaderIter, "__next__", "dataloader")
        if self.hub.window.capture == "native":
            # The Python path sees Tensor.backward through its function mode;
            # here the entry points themselves open the phase (Tensor.backward
            # calls torch.autograd.backward by its module attribute).
            self._patch(torch.autograd, "backward", "backward")
            self._patch(torch.autograd, "grad", "backward")

    def uninstall(self) -> None:
        handles, self.handles = self.handles, []
        for handle in handles:
            handle.remove()
        patched, self.patched = self.patched, []
        for cls, name, wrapper in reversed(patched):
            _unpatch(cls, name, wrapper)

    # --- optimizer.step: torch's global hooks -------------------------------
    def _optimizer_begin(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._begin("optimizer", type(optimizer))

    def _optimizer_end(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._end()

    def _begin(self, name: str, optimizer: type | None = None) -> None:
        hub = self.hub
        phase = None
        try:
            state = hub.thread_state()
            if hub.active and get_ident() not in hub.window.suspended:
                phase = hub.session.phase(name)
                phase.__enter__()  # its exit closes the step's frame too
                step = self._step_frame(optimizer) if optimizer is not None else None
                if step is not None:
                    hub.collector.enter((hub.session.frame(KIND_PYTHON, *step),), capture=True)
            state.phases.append(phase)  # None too, so that _end pops what this call pushed
        except Exception as exc:
            hub.fail(exc, "phase")

    def _end(self) -> None:
        hub = self.hub
        try:
            state = hub.thread_state()
            phase = state.phases.pop() if state.phases else None
            if phase is not None:
                phase.__exit__(None, None, None)
        except Exception as exc:
            hub.fail(exc, "phase")

    def _step_frame(self, cls: type) -> tuple[str, str, int] | None:
        """(name, file, line) of ``cls.step`` where torch's optimizers define it, else None."""
        if cls not in self.steps:
            code = getattr(inspect.unwrap(cls.step), "__code__", None)
            inside = code is not None and code.co_filename.startswith(_OPTIM_DIR)
            self.steps[cls] = (f"{cls.__name__}.step", code.co_filename, code.co_firstlineno) if inside else None
        return self.steps[cls]

    # --- wrapped methods ------------------------------------------------------
    def _patch(self, cls: Any, name: str, phase: str) -> None:
        hooks = self

        # The wrapped method is read from ``__wrapped__`` at each call, so that a
        # wrapper below ours can be unlinked when its profiler closes first.
        @functools.wraps(cls.__dict__[name])
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            hooks._begin(phase)
            try:
                return wrapper.__wrapped__(*args, **kwargs)
            finally:
                hooks._end()

        wrapper._deepcontext_phase = True  # type: ignore[attr-defined]
        setattr(cls, name, wrapper)
        self.patched.append((cls, name, wrapper))


def _unpatch(cls: Any, name: str, wrapper: Any) -> None:
    """Take ``wrapper`` out of ``cls.name``: put back what it wrapped when it is on
    top, else unlink it from the chain of our wrappers above it (profilers closed
    out of order). A foreign wrapper above ours keeps calling it; it is inert
    once its hub is (``_begin`` checks ``active``)."""
    current = cls.__dict__.get(name)
    if current is wrapper:
        setattr(cls, name, wrapper.__wrapped__)
        return
    while getattr(current, "_deepcontext_phase", False):
        if current.__wrapped__ is wrapper:
            current.__wrapped__ = wrapper.__wrapped__
            return
        current = current.__wrapped__
