"""The collector contract, continued: where the time between two recorded
calls goes (``_native.pyi``, ``Collector.exit``), and a span one thread lends
another (``Collector.lend``); run against both implementations."""

from __future__ import annotations

import threading

from dc_core.collect import reference
from tests.collect.test_collector import Snap, spin


def _two_calls_from_two_lines(c, first, second, between_s):
    c.enter([first], capture=True)
    c.exit()
    spin(between_s)  # Python time between the two calls, in this function
    c.enter([second], capture=True)
    return c.exit()


def test_time_between_two_scopes_lands_on_the_frame_they_share(collector):
    """The time between two calls is billed to the deepest node both were made
    from, not left on the enclosing scope (a phase) as its own time."""
    c = collector
    phase = c.intern(reference.KIND_PHASE, "forward")
    a, b = (
        c.intern(reference.KIND_OPERATOR, "aten::a"),
        c.intern(reference.KIND_OPERATOR, "aten::b"),
    )
    node = c.enter([phase], 0, False, 0)
    _two_calls_from_two_lines(c, a, b, 0.004)
    phase_ns = c.exit()
    s = Snap(c)
    (a_node,) = [n for n in range(len(s.raw["parent"])) if s.node_frame(n).name == "aten::a"]
    (b_node,) = [n for n in range(len(s.raw["parent"])) if s.node_frame(n).name == "aten::b"]
    a_line, b_line = s.raw["parent"][a_node], s.raw["parent"][b_node]
    assert s.node_frame(a_line).name == s.node_frame(b_line).name == "_two_calls_from_two_lines"
    assert s.node_frame(a_line).line < s.node_frame(b_line).line
    shared = s.raw["parent"][a_line]
    assert shared == s.raw["parent"][b_line]
    assert s.node_frame(shared).name == "test_time_between_two_scopes_lands_on_the_frame_they_share"
    assert s.value("cpu_time_ns", shared) >= 4_000_000
    assert s.value("cpu_time_ns", a_line) == s.value("cpu_time_ns", b_line) == 0
    # every ns of the phase is billed once: its own, plus everything below it
    below = sum(
        s.value("cpu_time_ns", n) for n in range(len(s.raw["parent"])) if n != node and n > 0
    )
    assert s.value("cpu_time_ns", node) + below == phase_ns
    assert s.value("cpu_time_ns", node) < 4_000_000


def _outermost_below(s: Snap, node: int, top: int) -> int:
    """The node on ``node``'s path right below ``top``."""
    while s.raw["parent"][node] != top:
        node = s.raw["parent"][node]
    return node


def test_a_scopes_first_and_last_stretch_go_to_the_outermost_frame_of_the_call_beside_them(
    collector,
):
    """Before its first call and after its last, a phase's time was spent on
    the way to that call and back: it goes to the outermost frame of that
    call's path, never to the phase alone."""
    c = collector
    phase, op = (
        c.intern(reference.KIND_PHASE, "forward"),
        c.intern(reference.KIND_OPERATOR, "aten::a"),
    )
    node = c.enter([phase], 0, False, 0)
    spin(0.002)
    op_node = c.enter([op], capture=True)
    op_ns = c.exit()
    spin(0.002)
    phase_ns = c.exit()
    s = Snap(c)
    outermost = _outermost_below(s, op_node, node)
    assert outermost != op_node and s.node_frame(outermost).kind == reference.KIND_PYTHON
    assert s.value("cpu_time_ns", outermost) >= 4_000_000
    assert s.value("cpu_time_ns", node) + s.value("cpu_time_ns", outermost) + op_ns == phase_ns
    assert s.value("cpu_time_ns", node) == 0


def test_time_after_a_scope_opened_elsewhere_goes_to_the_next_call(collector):
    """A scope under an explicit parent outside the enclosing one (a backward
    phase under the root) locates nothing below it: the time after it goes
    with the next call made inside."""
    c = collector
    fwd, bwd = c.intern(reference.KIND_PHASE, "forward"), c.intern(reference.KIND_PHASE, "backward")
    op = c.intern(reference.KIND_OPERATOR, "aten::a")
    node = c.enter([fwd], 0, False, 0)
    c.enter([bwd], 0, False, 0)
    bwd_ns = c.exit()
    spin(0.002)
    op_node = c.enter([op], capture=True)
    op_ns = c.exit()
    phase_ns = c.exit()
    s = Snap(c)
    outermost = _outermost_below(s, op_node, node)
    assert s.value("cpu_time_ns", outermost) >= 2_000_000
    assert (
        s.value("cpu_time_ns", node) + s.value("cpu_time_ns", outermost) + op_ns + bwd_ns
        == phase_ns
    )


def test_a_scope_with_no_call_inside_keeps_its_time(collector):
    c = collector
    node = c.enter([c.intern(reference.KIND_PHASE, "forward")], 0, False, 0)
    spin(0.002)
    phase_ns = c.exit()
    assert Snap(c).value("cpu_time_ns", node) == phase_ns >= 2_000_000


def test_a_span_lent_to_another_thread_leaves_the_waiting_threads_time(collector):
    """A thread that waits while another records the work (a backward run on
    a thread it joins) lends that span: the wall time is billed once, there."""
    c = collector
    fwd, bwd = c.intern(reference.KIND_PHASE, "forward"), c.intern(reference.KIND_PHASE, "backward")
    waiter = threading.get_ident()
    node = c.enter([fwd], 0, False, 0)
    spans = []

    def work():
        start = reference.now_ns()
        c.enter([bwd], 0, False, 0)
        spin(0.004)
        c.exit()
        spans.append((start, reference.now_ns()))
        c.lend(waiter, *spans[0])

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    c.lend(12345678, *spans[0])  # a thread never seen: nothing happens
    phase_ns = c.exit()
    s = Snap(c)
    lent = spans[0][1] - spans[0][0]
    assert s.value("cpu_time_ns", node) == phase_ns - lent
    assert lent >= s.value("cpu_time_ns", c.child(0, bwd)) >= 4_000_000
