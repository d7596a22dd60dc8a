"""The collector contract, continued: Python call paths, skipped files and how
module scopes interleave with them, run against both implementations (see
``test_collector.py``)."""

from __future__ import annotations

import inspect
import os

from dc_core.collect import reference
from tests.collect.test_collector import LIB_FILE, Frame, Snap, lib_call

# --- Python call paths -------------------------------------------------------


def test_python_frames_are_the_callers_stack_outermost_first(collector):
    c = collector

    def inner():
        return c.python_frames()

    def outer():
        return inner()

    ids, again = outer(), outer()
    call_line = inspect.currentframe().f_lineno - 1
    s = Snap(c)
    frames = [s.frame(i) for i in ids]
    assert frames[-3:] == [
        Frame(
            reference.KIND_PYTHON,
            test_python_frames_are_the_callers_stack_outermost_first.__qualname__,
            __file__,
            call_line,
            "",
            0,
        ),
        Frame(
            reference.KIND_PYTHON,
            outer.__qualname__,
            __file__,
            outer.__code__.co_firstlineno + 1,
            "",
            0,
        ),
        Frame(
            reference.KIND_PYTHON,
            inner.__qualname__,
            __file__,
            inner.__code__.co_firstlineno + 1,
            "",
            0,
        ),
    ]
    assert all(f.kind == reference.KIND_PYTHON and f.file and f.line > 0 for f in frames)
    assert not any(f.file.startswith(os.path.dirname(reference.__file__)) for f in frames)
    assert again == ids  # same lines, same interned frames


def test_skip_prefix_leaves_framework_frames_out(collector):
    c = collector

    def user():
        return c.python_frames()

    def names():
        return [Snap(c).frame(i) for i in lib_call(user)]

    assert [f.file for f in names()[-2:]] == [LIB_FILE, __file__]
    c.skip_prefix("/virtual/framework/")
    frames = names()
    assert LIB_FILE not in {f.file for f in frames}
    assert [f.name for f in frames[-2:]] == [names.__qualname__, user.__qualname__]


def test_scope_capture_interleaves_module_frames_with_python_frames(collector):
    """A module hook in framework code opens a scope with capture inside user
    function A; a capture in B (called by A) then holds only B's frames."""
    c = collector
    c.skip_prefix("/virtual/framework/")
    block = c.intern(reference.KIND_MODULE, "blocks.0", detail="Linear")
    mm = c.intern(reference.KIND_OPERATOR, "aten::mm")
    seen = {}

    def b():
        seen["frames"] = c.python_frames()
        seen["op"] = c.enter([mm], capture=True)
        c.exit()

    def a():
        seen["module"] = lib_call(c.enter, [block], -1, True)  # the hook, from framework code
        seen["enter_line"] = inspect.currentframe().f_lineno - 1
        b()
        c.exit()

    a()
    s = Snap(c)
    assert [s.frame(i).name for i in seen["frames"]] == [b.__qualname__]
    module_path = s.path(seen["module"])
    assert module_path[-3:] == (
        test_scope_capture_interleaves_module_frames_with_python_frames.__qualname__,
        a.__qualname__,
        "blocks.0",
    )
    assert s.frame(s.raw["frame"][s.raw["parent"][seen["module"]]]).line == seen["enter_line"]
    assert s.path(seen["op"]) == module_path + (b.__qualname__, "aten::mm")
    assert s.tree()[s.path(seen["op"])].get("count") == 1


def test_explicit_user_depth_0_lets_captures_start_at_the_outermost_frame(collector):
    c = collector
    phase = c.intern(reference.KIND_PHASE, "forward")
    everything = c.python_frames()
    c.enter([phase], 0, False, 0)  # a phase: captures under it see the whole stack
    inside = c.python_frames()
    op = c.enter([c.intern(reference.KIND_OPERATOR, "aten::mm")], capture=True)
    c.unwind(0)
    assert inside[:-1] == everything[:-1] and len(inside) == len(everything)
    s = Snap(c)
    assert s.path(op) == ("forward", *[s.frame(i).name for i in everything], "aten::mm")
    assert s.node_frame(c.child(0, phase)).name == "forward"


def test_user_depth_minus_2_inherits_the_enclosing_scopes(collector):
    """A scope that adds no Python frames (an ATen op inside a torch call)
    takes its parent scope's user depth instead of measuring the stack."""
    c = collector
    phase, mm = (
        c.intern(reference.KIND_PHASE, "forward"),
        c.intern(reference.KIND_OPERATOR, "aten::mm"),
    )
    seen = {}

    def deeper():
        seen["frames"] = c.python_frames()

    def user():
        c.enter([mm], -1, False, -2)  # inherits the phase's 0, not this function's depth
        deeper()
        seen["from_phase"] = seen.pop("frames")
        c.exit()
        c.enter([mm], -1, True)  # measured: this function's depth
        seen["op"] = c.enter([mm], -1, False, -2)  # inherits that
        deeper()
        seen["inherited"] = seen.pop("frames")
        c.unwind(1)

    c.enter([phase], 0, False, 0)
    user()
    c.unwind(0)
    assert c.enter([mm], -1, False, -2) == c.child(0, mm)  # no scope open: depth 0
    c.exit()
    s = Snap(c)
    assert [s.frame(i).name for i in seen["inherited"]] == [deeper.__qualname__]
    assert [s.frame(i).name for i in seen["from_phase"][-3:]] == [
        test_user_depth_minus_2_inherits_the_enclosing_scopes.__qualname__,
        user.__qualname__,
        deeper.__qualname__,
    ]
    assert s.path(seen["op"])[-2:] == ("aten::mm", "aten::mm")
    assert s.tree()[s.path(seen["op"])]["count"] == 1
