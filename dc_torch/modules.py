"""Module context: global ``nn.Module`` forward hooks open a ``module`` scope.

The scope's frame is the module's dotted path from the outermost module called
on this thread (its root) with the class as detail, e.g. ``blocks.0.attn
(SelfAttention)``; where the adapter has a ``naming_root`` (the Lightning
callback sets the LightningModule), its modules are named from it instead
(``net.0``, as its ``named_modules()`` says, though ``self.net`` is called
first). The Python frames between the enclosing scope and the
module call are captured first, so module frames interleave with the lines
that called them, and the module's own forward lines nest below it.
"""

from __future__ import annotations

import sys
from threading import get_ident
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.modules import module as module_mod
from torch.utils._python_dispatch import _pop_mode, _push_mode

from dc_core.collect.collector import INNERMOST
from dc_torch.ops import AtenMode, OperatorMode

if TYPE_CHECKING:
    from dc_torch.hub import Hub

_is_compiling = torch.compiler.is_compiling


class ModuleHooks:
    """Installs and removes the two global module hooks."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.handles: list[Any] = []

    def install(self) -> None:
        _skip_in_dynamo(self.pre, self.post)
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
        hub = self.hub
        if not hub.active:
            return
        try:
            state = hub.thread_state()
            if type(module) is _optimized_module():
                # Dynamo guards on the torch-function mode stack (and runs eagerly
                # under a dispatch mode): with our modes on them, a model compiled
                # before the window would recompile when it opens. The compiled
                # region records itself (dc_torch.compiled), so our modes stand
                # aside meanwhile; the wrapper gets no frame (its _orig_mod does).
                state.set_aside.append(_set_aside_modes(hub))
                return
            if get_ident() in hub.window.suspended:
                return
            fid = hub.frames.module(module, state.modules[0] if state.modules else module)
            # A thread in no scope (one of the user's own, outside the steps)
            # runs under the `other` phase, as the native capture places it.
            unscoped = not state.modules and hub.collector.depth() == 0
            hub.collector.enter((fid,), hub.unscoped_node() if unscoped else INNERMOST, True)
            state.modules.append(module)
        except Exception as exc:
            hub.fail(exc, "module")

    def post(self, module: Any, args: Any, output: Any) -> None:
        if _is_compiling():
            return
        hub = self.hub
        try:
            state = hub.thread_state()
            if type(module) is _optimized_module():
                if state.set_aside:
                    _restore_modes(state.set_aside.pop())
                return
            if state.modules and state.modules[-1] is module:
                state.modules.pop()
                if hub.active:
                    hub.collector.exit()
        except Exception as exc:
            hub.fail(exc, "module")


class ModuleBoundaries:
    """The native path's global module hooks, in comprehensive windows: each
    module call's start and end timestamped in the collector (``module_enter``
    / ``module_exit``, C calls), so a module's time is its range, its own code
    before its first operator and after its last included. Lightweight
    windows install none: there that code goes to the line that called the
    module, and no Python runs per module call (about 2 µs each with hooks)."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.handles: list[Any] = []

    def install(self) -> None:
        enter, leave = self.hub.collector.module_enter, self.hub.collector.module_exit

        def pre(module: Any, args: Any) -> None:
            if not _is_compiling():  # folds away under dynamo tracing
                enter()

        def post(module: Any, args: Any, output: Any) -> None:
            if not _is_compiling():
                leave()

        _skip_in_dynamo(pre, post)
        self.handles = [
            module_mod.register_module_forward_pre_hook(pre),
            module_mod.register_module_forward_hook(post, always_call=True),
        ]

    def uninstall(self) -> None:
        handles, self.handles = self.handles, []
        for handle in handles:
            handle.remove()


def _optimized_module() -> type | None:
    """``torch.compile(module)``'s wrapper class, or None while dynamo is not
    loaded (then nothing is compiled, and importing it here would cost seconds)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return getattr(eval_frame, "OptimizedModule", None)


def _set_aside_modes(hub: Hub) -> tuple[list[Any], list[Any]]:
    """Pop the hub's modes off the top of this thread's function-mode and
    dispatch-mode stacks (dynamo runs a frame eagerly under a dispatch mode)."""
    return _pop_ours(
        hub,
        torch._C._len_torch_function_stack,
        torch._C._get_function_stack_at,
        torch._C._pop_torch_function_stack,
    ), _pop_ours(
        hub, torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at, _pop_mode
    )


def _pop_ours(hub: Hub, length: Any, at: Any, pop: Any) -> list[Any]:
    popped = []
    while length() and _ours(at(length() - 1), hub):
        popped.append(pop())
    return popped


def _ours(mode: Any, hub: Hub) -> bool:
    return isinstance(mode, (OperatorMode, AtenMode)) and mode.hub is hub


def _restore_modes(popped: tuple[list[Any], list[Any]]) -> None:
    function_modes, dispatch_modes = popped
    for mode in reversed(dispatch_modes):
        _push_mode(mode)
    for mode in reversed(function_modes):
        torch._C._push_on_torch_function_stack(mode)


def _skip_in_dynamo(*hooks: Any) -> None:
    """Tell dynamo never to trace the hooks or anything they call: global module
    hooks also run around compiled modules, where converting their frames cost
    ~25 ms each in the first profiled step. Only when the user compiles (dynamo
    already loaded); a torch without this API just pays that once."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    try:
        strategy = eval_frame.FrameExecStrategy(
            eval_frame.FrameAction.SKIP, eval_frame.FrameAction.SKIP
        )
        for hook in hooks:
            eval_frame.set_code_exec_strategy(hook.__code__, strategy)
    except AttributeError:
        return
