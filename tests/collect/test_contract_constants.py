"""The collectors' constants are the vocabulary's: ``dc_core.model.kinds`` is
the one list of frame kinds, metric units and monitor columns, and both
collectors (and the stub's documented values) must agree with it."""

from __future__ import annotations

import importlib
import re
import time
from pathlib import Path
from types import ModuleType

import pytest

import dc_core
from dc_core.collect import reference, sysmon
from dc_core.model.kinds import KINDS, METRICS, MONITOR_COLUMNS, MONITOR_SERIES, UNITS
from tests.conftest import IMPLEMENTATIONS, _collector_class

STUB = Path(dc_core.__file__).with_name("_native.pyi")


def implementation(name: str) -> ModuleType:
    """The module of one collector implementation (skips, or fails in CI, when
    the native one is not built)."""
    return importlib.import_module(_collector_class(name).__module__)


def constants(module: ModuleType, prefix: str) -> dict[str, int]:
    return {name: getattr(module, name) for name in dir(module) if name.startswith(prefix)}


def stub_values() -> dict[str, int]:
    """``NAME: int  # value`` lines of the stub: the numbers it documents."""
    return {
        m[1]: int(m[2]) for m in re.finditer(r"^(\w+): int\s+#\s*(-?\d+)", STUB.read_text(), re.M)
    }


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_kind_constants_are_the_vocabularys_kind_numbers(name):
    module = implementation(name)
    assert constants(module, "KIND_") == {f"KIND_{kind.upper()}": i for i, kind in enumerate(KINDS)}


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_every_constant_is_the_native_ones_and_the_stubs(name):
    module, documented = implementation(name), stub_values()
    for prefix in ("KIND_", "METRIC_", "FLAG_"):
        found = constants(module, prefix)
        assert found == {k: v for k, v in documented.items() if k.startswith(prefix)}, prefix
        assert found == constants(reference, prefix), prefix


def test_the_facade_reexports_the_contract_constants():
    from dc_core.collect import collector as collector_mod

    for prefix in ("KIND_", "METRIC_", "FLAG_"):
        assert constants(collector_mod, prefix) == constants(reference, prefix)


def test_builtin_metrics_are_registered_in_id_order_with_the_vocabularys_units(collector):
    snap = collector.snapshot()
    assert list(snap["metrics"]) == list(reference.BUILTIN_METRICS)
    assert snap["units"] == {name: UNITS[name] for name in reference.BUILTIN_METRICS}
    ids = {name: collector.metric(name, UNITS[name]) for name in reference.BUILTIN_METRICS}
    assert ids == {
        "cpu_time_ns": reference.METRIC_CPU_TIME,
        "count": reference.METRIC_COUNT,
        "samples": reference.METRIC_SAMPLES,
    }
    assert set(reference.BUILTIN_METRICS) <= set(METRICS)


def test_monitor_columns_are_the_vocabularys_in_order(collector):
    assert sysmon.COLUMNS == MONITOR_COLUMNS
    assert list(collector.monitor_samples()) == list(MONITOR_COLUMNS)  # empty: columns still named
    collector.start_monitor(5)
    time.sleep(0.03)
    collector.stop_monitor()
    samples = collector.monitor_samples()
    assert list(samples) == list(MONITOR_COLUMNS)
    rows = len(samples["t_ns"])
    assert rows >= 2
    for series, (_, per_device) in MONITOR_SERIES.items():
        assert len(samples[series]) == rows, series
        assert all(isinstance(v, list) == per_device for v in samples[series]), series


def test_a_monitor_stopped_at_once_still_has_its_start_and_end_readings(make_collector):
    """Regression: the native monitor gave one reading when stop_monitor()
    came before its thread's first tick; the contract says two."""
    for _ in range(10):
        collector = make_collector()
        collector.start_monitor(500)
        collector.stop_monitor()
        assert len(collector.monitor_samples()["t_ns"]) == 2


def test_the_facades_enter_sentinels_are_the_contracts():
    """``enter``'s sentinels are named once, in the facade: its defaults in the
    stub, the inherit value the stub documents and the reference collector
    uses (the native one keeps it as ``kInheritUserDepth``, not exported)."""
    from dc_core.collect import collector as collector_mod

    signature = re.search(
        r"def enter\(\s*self, frames: Sequence\[int\], parent: int = (-?\d+), "
        r"capture: bool = False, user_depth: int = (-?\d+)",
        STUB.read_text(),
    )
    assert signature is not None
    assert (collector_mod.INNERMOST, collector_mod.MEASURE) == (
        int(signature[1]),
        int(signature[2]),
    )
    assert (
        "when it is -2" in STUB.read_text()
        and collector_mod.INHERIT == reference._INHERIT_USER_DEPTH == -2
    )
    assert collector_mod.ROOT_NODE == 0 and collector_mod.WHOLE_STACK == 0


def test_enter_by_name_opens_where_its_names_say(collector):
    from dc_core.collect.collector import INHERIT, INNERMOST, MEASURE, ROOT_NODE, WHOLE_STACK

    c = collector
    phase, mm = (
        c.intern(reference.KIND_PHASE, "forward"),
        c.intern(reference.KIND_OPERATOR, "aten::mm"),
    )
    # no scope open: under the root
    assert c.enter([mm], INNERMOST, False, INHERIT) == c.child(ROOT_NODE, mm)
    c.exit()
    top = c.enter([phase], ROOT_NODE, False, WHOLE_STACK)
    assert top == c.child(ROOT_NODE, phase)
    assert c.enter([mm], INNERMOST, False, MEASURE) == c.child(top, mm)  # under the innermost scope
    c.unwind(0)


def test_a_frameless_scope_in_backward_goes_beside_the_function_before_it(collector):
    """A scope with no frames of its own opened in the backward phase (a
    collective autograd's engine issues between functions, as DDP's reducer
    does) goes where the function before it was: under that function's
    context, beside it, whether the function's scope was its own context
    (the Python path) or hung from it. Elsewhere it stays where it is."""
    from dc_core.collect.collector import INHERIT, INNERMOST, ROOT_NODE, WHOLE_STACK

    c = collector
    backward, forward = (c.intern(reference.KIND_PHASE, p) for p in ("backward", "forward"))
    module = c.intern(reference.KIND_MODULE, "blocks.0")
    mm, reduce = (c.intern(reference.KIND_OPERATOR, n) for n in ("aten::mm", "c10d::allreduce_"))
    for phase in (backward, forward):
        top = c.enter([phase], ROOT_NODE, False, WHOLE_STACK)
        context = c.child(top, module)
        function = c.child(context, mm)
        for parent, frames in ((context, [mm]), (function, [])):  # hung from it; its own context
            assert c.enter(frames, parent, False, INHERIT) == function
            c.exit()
            placed = c.enter([reduce], INNERMOST, False, INHERIT)
            assert placed == c.child(context if phase == backward else top, reduce)
            c.exit()
        c.unwind(0)


def test_exit_own_is_what_no_scope_inside_took(collector):
    from dc_core.collect.collector import INHERIT, ROOT_NODE, WHOLE_STACK

    c = collector
    outer = c.enter([c.intern(reference.KIND_PHASE, "forward")], ROOT_NODE, False, WHOLE_STACK)
    c.enter([c.intern(reference.KIND_OPERATOR, "aten::mm")], outer, False, INHERIT)
    time.sleep(0.02)
    inner = c.exit()
    own = c.exit_own()
    assert inner >= 20_000_000 and 0 <= own < inner
    assert c.exit_own() == -1  # nothing open
