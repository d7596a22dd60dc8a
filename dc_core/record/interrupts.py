"""Ctrl-C held back while the profiler installs or removes its hooks.

A ``KeyboardInterrupt`` landing halfway through installing hooks would leave
some of them in place for the rest of the process, with nothing left to
remove them. The few lines that hook and unhook a framework run inside
``deferred_interrupts()``: a SIGINT that arrives meanwhile is held and
delivered, to whatever handler was installed before, as soon as the block
ends, so the user's Ctrl-C still stops training, a moment later, with the
framework exactly as it was.

Only the main thread receives signals (and only it may change handlers);
elsewhere the block runs as it is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT for the duration of the block, then deliver it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.getsignal(signal.SIGINT)
    except (ValueError, OSError):  # an embedded interpreter without signal support
        yield
        return
    if previous is None or previous is signal.SIG_IGN:  # not installed from Python, or ignored
        yield
        return
    held: list[Any] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(frame)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            _deliver(previous, held[0])


def _deliver(handler: Any, frame: Any) -> None:
    if callable(handler):
        handler(signal.SIGINT, frame)  # Python's default raises KeyboardInterrupt here
    else:  # SIG_DFL: the process ends the way it would have
        os.kill(os.getpid(), signal.SIGINT)
