"""memory_growth across the windows of a rank, by context: the line that keeps
what it allocates in every window is named with its rate; a loop variable
carried to the next step, a one-off, an unsteady keep or too few windows
raise nothing."""

from __future__ import annotations

from dc_core.analyzer import analyze_ranks
from dc_core.analyzer.base import saved_bytes
from dc_core.store.profile import DeviceMemory
from tests.analyzer.helpers import line, only, profile, rules, series

MIB = 2**20
STARTS = (2, 6, 10, 14)  # windows of 2 steps every 4 steps


def _window(start: int, kept: int, steps: int = 2, alloc: int | None = None, inner: bool = False):
    """A window of ``steps`` steps: train.py:11 makes the batch (2 MiB a step, the last one
    still held at the window's end), train.py:17 allocates ``alloc`` and frees all but ``kept``."""
    alloc = 10 * MIB * steps if alloc is None else alloc
    op = f"aten::linear @alloc_bytes={alloc},free_bytes={alloc - kept},cpu_time_ns=1000000"
    body = (line("forward", "net.py:30"), op) if inner else op
    spec = (
        "forward",
        (
            line("<module>", "train.py:11"),
            f"aten::randn @alloc_bytes={2 * MIB * steps},free_bytes={2 * MIB * (steps - 1)}",
        ),
        (line("<module>", "train.py:17"), ("module:net", body)),
    )
    return profile(
        spec,
        steps=(start, start + steps),
        memory=[DeviceMemory("cpu", peak_bytes=200 * MIB)],
    )


def test_a_line_keeping_what_it_allocates_in_every_window_is_named():
    windows = [_window(s, kept=18 * MIB) for s in STARTS]
    f = only(analyze_ranks(windows), "memory_growth")
    assert f["severity"] == "warning" and f["path"] == ["forward", "train.py:17 <module>"]
    assert windows[-1].tree.node_frame(f["node"]).line == 17
    e = f["evidence"]
    assert e["steps"] == [14, 16] and e["windows"] == [[s, s + 2] for s in STARTS]
    assert e["kept_bytes"] == [18 * MIB] * 4 and e["kept_per_step_bytes"] == 9 * MIB
    # 9 MiB a step from step 2 to the end of step 15
    assert e["growth_bytes"] == saved_bytes(f) == 14 * 9 * MIB
    assert "keeps ≈ 9.0 MiB per step that it never frees" in f["message"]
    assert "≈ 126.0 MiB more at the cpu memory peak from step 2 to step 15" in f["message"]
    assert "loss.item()" in f["suggestion"] and "torch.no_grad()" in f["suggestion"]


def test_the_innermost_line_holding_the_kept_bytes_is_named():
    windows = [_window(s, kept=18 * MIB, inner=True) for s in STARTS]
    f = only(analyze_ranks(windows), "memory_growth")
    assert f["path"][-1] == "net.py:30 forward" and "train.py:17 <module>" in f["path"]


def test_what_a_loop_variable_carries_to_the_next_step_is_no_growth():
    # train.py:11 ends each window holding its last batch; train.py:17 one step's output too
    windows = [_window(s, kept=10 * MIB) for s in STARTS]
    assert "memory_growth" not in rules(analyze_ranks(windows))


def test_no_growth_from_an_unsteady_keep_a_one_off_or_too_few_windows():
    unsteady = [_window(s, kept=k) for s, k in zip(STARTS, (18 * MIB, 18 * MIB, 3 * MIB, 18 * MIB))]
    assert "memory_growth" not in rules(analyze_ranks(unsteady))
    once = [_window(s, kept=18 * MIB if s == 2 else 0) for s in STARTS]  # state made once
    assert "memory_growth" not in rules(analyze_ranks(once))
    two = [_window(s, kept=18 * MIB) for s in STARTS[:2]]
    assert "memory_growth" not in rules(analyze_ranks(two))


def test_one_step_windows_cannot_tell_a_keep_from_a_loop_variable():
    windows = [_window(s, kept=9 * MIB, steps=1) for s in STARTS]
    assert "memory_growth" not in rules(analyze_ranks(windows))


def test_growth_below_the_floor_is_no_finding():
    # 1 MiB a step over 14 steps: under 64 MiB
    windows = [_window(s, kept=2 * MIB, alloc=2 * MIB) for s in STARTS]
    assert "memory_growth" not in rules(analyze_ranks(windows))
    assert "memory_growth" in rules(
        analyze_ranks(windows, {"memory_growth.min_mb": 8, "memory_growth.min_fraction": 0.05})
    )


def test_a_rising_rss_is_reported_only_where_no_context_is_named():
    windows = [_window(s, kept=18 * MIB) for s in STARTS]
    for i, p in enumerate(windows):
        p.system = [series("rss_bytes", [1000 * MIB + i * 100 * MIB] * 5)]
    f = only(analyze_ranks(windows), "memory_growth")
    assert f["path"][-1] == "train.py:17 <module>"
    assert f["evidence"]["rss_median_bytes"] == [(1000 + 100 * i) * MIB for i in range(4)]


def test_gradients_kept_by_accumulation_over_steps_are_no_growth():
    # accumulating over 4 steps: the backward makes the gradients in one step of each window
    def accumulating(start):
        spec = (
            "backward",
            (
                line("<module>", "train.py:17"),
                f"aten::linear [backward] @alloc_bytes={32 * MIB},free_bytes=0",
            ),
        )
        return profile(
            spec, steps=(start, start + 2), memory=[DeviceMemory("cpu", peak_bytes=200 * MIB)]
        )

    assert "memory_growth" not in rules(analyze_ranks([accumulating(s) for s in STARTS]))
