"""The GIL-free frame walk of native capture reads the interpreter's private
frame records; at every capture start it is checked against the public frame
API (PyFrame_GetBack / GetCode / GetLasti), and where they differ frames are
read with the GIL instead. Here: it agrees in every shape of stack a training
loop produces (deep recursion, generators, frames called from C, handlers)."""

from __future__ import annotations

import functools
import sys

import pytest

_native = pytest.importorskip("dc_core._native")


def test_walk_matches_the_public_frame_api_in_every_stack_shape():
    c = _native.Collector()
    phase = c.intern(_native.KIND_PHASE, "backward")
    module_call = type("M", (), {"__call__": lambda self: None}).__call__.__code__
    seen: list[tuple[str, bool]] = []

    def check(where: str) -> None:
        seen.append((where, c.capture_start(phase, False, module_call, None, True)))
        c.capture_stop()

    def deep(n: int) -> None:
        check("recursion") if n == 0 else deep(n - 1)

    def generator():
        check("generator")
        yield

    class Context:
        def __enter__(self):
            check("called from C")

        def __exit__(self, *exc):
            check("exit handler")

    deep(120)
    list(generator())
    with Context():
        pass
    try:
        raise ValueError
    except ValueError:
        check("except")
    functools.reduce(lambda a, b: check("lambda from C"), [1, 2])
    assert len(seen) == 6
    expected = sys.version_info[:2] in ((3, 11), (3, 12))  # the layouts native/pyframes.cc knows
    assert seen == [(where, expected) for where, _ in seen]
