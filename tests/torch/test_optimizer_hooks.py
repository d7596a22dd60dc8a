"""Our global optimizer-step hooks come out of torch whatever interrupts them."""

from __future__ import annotations

import signal
import sys
import threading

import pytest
import torch
from torch.optim import optimizer as optimizer_mod

from dc_torch import optimizer_hooks
from dc_torch.optimizer_hooks import OptimizerHooks


def _registered() -> int:
    return len(optimizer_mod._global_optimizer_pre_hooks) + len(
        optimizer_mod._global_optimizer_post_hooks
    )


def _lines_of_the_wrapper() -> int:
    """How many lines the wrapper of our hooks runs per call."""
    code = optimizer_hooks._RUN
    return len({line for _, _, line in code.co_lines() if line and line > code.co_firstlineno})


def _interrupt_at(k: int):
    """A ``sys.settrace`` function raising SIGINT at the ``k``-th line our hook wrapper runs."""
    seen = [0]

    def trace(frame, event, arg):
        if frame.f_code is not optimizer_hooks._RUN:
            return None
        if event == "line":
            seen[0] += 1
            if seen[0] == k + 1:
                signal.raise_signal(signal.SIGINT)
        return trace

    return trace


@pytest.mark.parametrize("k", range(4))
def test_a_ctrl_c_at_any_line_of_our_hook_lets_it_come_out(k):
    """A Ctrl-C anywhere in our hook's wrapper (the one under way when the
    user's step is interrupted) must not keep it from coming out: the wrapper
    counted its calls, and one between the count and the ``try`` that undid
    it kept the hooks in torch for good."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    param = torch.nn.Parameter(torch.ones(2))
    param.grad = torch.ones(2)
    opt = torch.optim.SGD([param], lr=0.1)
    before = _registered()
    hooks = OptimizerHooks()
    calls = []
    hooks.register(lambda *a: calls.append("pre"), lambda *a: calls.append("post"))
    interrupted = False
    sys.settrace(_interrupt_at(k))
    try:
        opt.step()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sys.settrace(None)
    assert interrupted == (k < 2 * _lines_of_the_wrapper())  # a pre and a post hook
    ran = ["pre", "post"][: k // _lines_of_the_wrapper()] if interrupted else ["pre", "post"]
    assert calls == ran
    assert hooks.remove() is True and _registered() == before


def test_our_hook_running_on_another_thread_keeps_them_in_until_it_returns():
    """torch iterates its registry while it calls the hooks, on any thread:
    taking ours out under that iteration would break that thread's step."""
    param = torch.nn.Parameter(torch.ones(2))
    param.grad = torch.ones(2)
    opt = torch.optim.SGD([param], lr=0.1)
    before = _registered()
    inside, go_on = threading.Event(), threading.Event()

    def pre(*args) -> None:
        inside.set()
        assert go_on.wait(30)

    hooks = OptimizerHooks()
    hooks.register(pre)
    stepping = threading.Thread(target=opt.step)
    stepping.start()
    try:
        assert inside.wait(30)
        assert hooks.remove() is False and _registered() == before + 1
    finally:
        go_on.set()
        stepping.join(30)
    assert hooks.remove() is True and _registered() == before
