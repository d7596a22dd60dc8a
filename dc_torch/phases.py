"""Optimizer, dataloader and evaluation phases, hooked only while a window is open.

``Optimizer.step`` of every optimizer runs the global step hooks torch keeps
for profilers; ``zero_grad`` and ``DataLoader`` iteration are wrapped at the
class, gradient clipping (``torch.nn.utils.clip_grad_norm_`` and its kin,
which Lightning, Hugging Face and plain loops all call through that module)
at ``torch.nn.utils`` (all restored when the window closes), so no user
object is touched. Clipping is part of the update: the ``optimizer`` phase,
under a frame of its own (``clip_grad.py:… clip_grad_norm_``).

Evaluation inside a training window (a validation loop between steps, or in
one) is phase ``eval``: from ``model.eval()`` to ``model.train()`` on a
module with submodules (a model, not one layer frozen), as every trainer and
most plain loops mark it.

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
from collections.abc import Callable
from threading import get_ident
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import dataloader as dataloader_mod

from dc_core.collect.collector import KIND_PYTHON
from dc_core.collect.ownfiles import cut_own_frames
from dc_torch.optimizer_hooks import OptimizerHooks

if TYPE_CHECKING:
    from dc_torch.hub import Hub
    from dc_torch.state import ThreadState

_OPTIM_DIR = os.path.dirname(torch.optim.__file__) + os.sep  # where torch's optimizers live
#: ``torch.nn.utils`` functions that clip gradients (or compute the norm to clip by).
CLIPPING = ("clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm")


class PhaseHooks:
    """Installs and removes the optimizer step hooks and the phase wrappers."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.optimizer_hooks = OptimizerHooks()
        self.patched: list[tuple[type, str, Any]] = []
        # told each batch a DataLoader gives in the window (memory's `input`)
        self.batch_seen: Callable[[Any], None] | None = None
        self.steps: dict[
            type, tuple[str, str, int] | None
        ] = {}  # optimizer class -> its step's frame

    def install(self) -> None:
        self.optimizer_hooks.register(self._optimizer_begin, self._optimizer_end)
        self.patch(torch.optim.Optimizer, "zero_grad", "optimizer")
        self.patch(dataloader_mod._BaseDataLoaderIter, "__next__", "dataloader")
        for name in CLIPPING:
            if callable(torch.nn.utils.__dict__.get(name)):
                self.patch(
                    torch.nn.utils,
                    name,
                    "optimizer",
                    frame=_frame_of(torch.nn.utils.__dict__[name]),
                )
        self._patch_train()
        # The entry points themselves open the phase (Tensor.backward calls
        # torch.autograd.backward by its module attribute); on the Python path
        # the operator mode does on its own thread (autograd.BackwardRunner),
        # these on every other (a backward run from a thread the step joins).
        self.patch(torch.autograd, "backward", "backward")
        self.patch(torch.autograd, "grad", "backward")

    def uninstall(self) -> bool:
        """Take the hooks and wrappers out; False while the optimizer hooks must
        wait (one of them is running: `OptimizerHooks`)."""
        patched, self.patched = self.patched, []
        for cls, name, wrapper in reversed(patched):
            _unpatch(cls, name, wrapper)
        return self.optimizer_hooks.remove()

    # --- optimizer.step: torch's global hooks -------------------------------
    def _optimizer_begin(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._begin("optimizer", type(optimizer))

    def _optimizer_end(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        step = self._end()
        # not when the update also ended the step (deepcontext run)
        if step == self.hub.session.last_step:
            self.hub.session.update_end()

    def _begin(
        self, name: str, optimizer: type | None = None, frame: tuple[str, str, int] | None = None
    ) -> None:
        hub = self.hub
        phase = None
        try:
            state = hub.thread_state()
            window, thread = hub.window, get_ident()
            mode_runs_it = (
                name == "backward" and window.capture == "python" and thread == window.thread
            )
            # a backward inside a backward (an engine's runs autograd's): one scope,
            # at the engine's caller. Not other phases: an optimizer's phase may
            # stay open on this list while a closure's phases run (Lightning's
            # clipping after it belongs to the update)
            inner = next((p for p, _ in reversed(state.phases) if p is not None), None)
            again = name == "backward" and getattr(inner, "name", None) == name
            if hub.active and thread not in window.suspended and not mode_runs_it and not again:
                phase = hub.session.phase(name, below_caller=name == "backward")
                phase.__enter__()  # its exit closes the step's frame too
                if optimizer is not None:
                    frame = self._step_frame(optimizer)
                if frame is not None:
                    hub.collector.enter((hub.session.frame(KIND_PYTHON, *frame),), capture=True)
            # None too, so that _end pops what this call pushed
            state.phases.append((phase, hub.session.last_step))
        except Exception as exc:
            hub.fail(exc, "phase")

    def _end(self) -> int | None:
        """Close the phase the matching ``_begin`` opened; returns the step it began in."""
        hub = self.hub
        try:
            state = hub.thread_state()
            phase, step = state.phases.pop() if state.phases else (None, None)
            if phase is not None:
                phase.__exit__(None, None, None)
            return step
        except Exception as exc:
            hub.fail(exc, "phase")
            return None

    def _step_frame(self, cls: type) -> tuple[str, str, int] | None:
        """(name, file, line) of ``cls.step`` where torch's optimizers define it, else None."""
        if cls not in self.steps:
            code = getattr(inspect.unwrap(cls.step), "__code__", None)
            inside = code is not None and code.co_filename.startswith(_OPTIM_DIR)
            self.steps[cls] = (
                (f"{cls.__name__}.step", code.co_filename, code.co_firstlineno) if inside else None
            )
        return self.steps[cls]

    # --- evaluation: model.eval() ... model.train() -----------------------------
    def _mode(self, module: Any, args: tuple, kwargs: dict) -> ThreadState | None:
        """Before ``module.train(*args, **kwargs)`` runs: open or close the eval
        phase on the outermost call (``eval()`` recurses into every submodule).
        Returns the thread state whose ``mode_depth`` the caller restores."""
        hub = self.hub
        try:
            state = hub.thread_state()
            training = args[0] if args else kwargs.get("mode", True)  # train(mode=True)
            state.mode_depth += 1
            if not isinstance(training, bool):  # torch's train() raises its own error for it
                return state
            # an evaluation window's steps are eval already
            if (
                state.mode_depth > 1
                or not hub.active
                or get_ident() not in (hub.session.step_thread, 0)
                or hub.session.default_phase == "eval"
            ):
                return state
            session, open_ = hub.session, state.evaluating
            if not training and open_ is None and next(module.children(), None) is not None:
                phase = session.phase("eval")
                phase.__enter__()
                state.evaluating = (module, phase, session.last_step)
            elif training and open_ is not None and open_[0] is module:
                state.evaluating = None
                if open_[2] == session.last_step:  # else the step's end closed it already
                    open_[1].__exit__(None, None, None)
            return state
        except Exception as exc:
            hub.fail(exc, "eval phase")
            return None

    def _patch_train(self) -> None:
        hooks, cls = self, torch.nn.Module

        @functools.wraps(cls.__dict__["train"])
        def train(module: Any, *args: Any, **kwargs: Any) -> Any:
            state = hooks._mode(module, args, kwargs)
            try:
                return train.__wrapped__(module, *args, **kwargs)
            finally:
                if state is not None:
                    state.mode_depth -= 1

        self._install(cls, "train", train)

    # --- wrapped methods ------------------------------------------------------
    def patch(
        self,
        cls: Any,
        name: str,
        phase: str,
        frame: tuple[str, str, int] | None = None,
    ) -> None:
        """Run ``cls.name`` as phase ``phase`` (under ``frame``, when given) until
        `uninstall`."""
        hooks = self

        # The wrapped method is read from ``__wrapped__`` at each call, so that a
        # wrapper below ours can be unlinked when its profiler closes first.
        @functools.wraps(cls.__dict__[name])
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            hooks._begin(phase, frame=frame)
            try:
                out = wrapper.__wrapped__(*args, **kwargs)
            except BaseException as exc:  # the user's, with the traceback it has without us
                cut_own_frames(exc)
                raise
            finally:
                hooks._end()
            seen = hooks.batch_seen
            if phase == "dataloader" and seen is not None:
                seen(out)  # keeps its own errors (fail-open)
            return out

        self._install(cls, name, wrapper)

    def _install(self, owner: Any, name: str, wrapper: Any) -> None:
        wrapper._deepcontext_phase = True  # type: ignore[attr-defined]
        setattr(owner, name, wrapper)
        self.patched.append((owner, name, wrapper))


def _frame_of(func: Any) -> tuple[str, str, int] | None:
    """(name, file, line) of a function's definition: the frame its phase shows it under."""
    code = getattr(inspect.unwrap(func), "__code__", None)
    return (func.__name__, code.co_filename, code.co_firstlineno) if code is not None else None


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
