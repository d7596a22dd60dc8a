"""The Memory view in a real ``tensorboard --logdir`` and headless Chromium:
the rows and bytes it shows, the peak and its link, the device selector and a
window without memory. In CI (``CI=true``) a missing Chromium or Playwright
fails, as for `test_browser`."""

from __future__ import annotations

from pathlib import Path

import pytest

from dc_core.store.logdir import write_profile
from dc_core.tensorboard.memory import NOT_COLLECTED
from tests.tensorboard.chromium import tab_page
from tests.tensorboard.conftest import make_profile, memory_profile
from tests.tensorboard.test_browser import ARTIFACTS
from tests.tensorboard.test_memory import CPU_LINE, LINE

DASH = "\u2013"

#: The rows first shown, opened along the most bytes: label, live at peak,
#: self, then parameter, gradient, optimizer state, saved for backward and
#: temporary (input holds nothing on this device: no column).
ROWS = [
    ["steps 5\u20136", "41.0 MiB", "0 B", "8.0 MiB", "8.0 MiB", "16.0 MiB", "8.0 MiB", "1.0 MiB"],
    ["optimizer", "17.0 MiB", "0 B", DASH, DASH, "16.0 MiB", DASH, "1.0 MiB"],
    ["optim.py:1 step", "17.0 MiB", "16.0 MiB", DASH, DASH, "16.0 MiB", DASH, "1.0 MiB"],
    ["forward", "16.0 MiB", "0 B", "8.0 MiB", DASH, DASH, "8.0 MiB", DASH],
    ["backward", "8.0 MiB", "0 B", DASH, "8.0 MiB", DASH, DASH, DASH],
]


def shown_rows(tab) -> list[list[str]]:
    return tab.locator(".rows .row").evaluate_all(
        """rows => rows.map((r) => [r.querySelector(".label").textContent,
            ...[...r.querySelectorAll(".cell.num")].map((c) => c.textContent)])"""
    )


def column_titles(tab) -> list[str]:
    return tab.locator(".row.header .cell.head:not(.bar-head)").all_inner_texts()


@pytest.mark.slow
def test_memory_view_in_tensorboard_and_chromium(tmp_path: Path, src: Path):
    logdir = tmp_path / "logs"
    write_profile(memory_profile(src), logdir, "mem")
    write_profile(make_profile(src, 0, (5, 8)), logdir, "plain")
    with tab_page(logdir, tmp_path, {"run": "mem", "view": "memory"}) as (page, tab, errors):
        tab.locator(".row .label", has_text="optim.py:1 step").wait_for()
        assert tab.locator("button.tab.active").inner_text() == "Memory"
        # The header says what the report says, then the bytes by category.
        assert tab.locator(".memory-line").inner_text() == LINE
        assert tab.locator(".memory-legend .key").all_inner_texts() == [
            "parameter 8.0 MiB (19.5%)",
            "gradient 8.0 MiB (19.5%)",
            "optimizer_state 16.0 MiB (39.0%)",
            "saved_for_backward 8.0 MiB (19.5%)",
            "temporary 1.0 MiB (2.4%)",
        ]
        assert tab.locator(".memory-facts").inner_text() == (
            "held from before the window 24.0 MiB \u00b7 the allocator's own peak 41.0 MiB"
            " \u00b7 reserved at most 64.0 MiB"
        )
        assert tab.locator("select[aria-label=Device]").input_value() == "cuda:0"
        # The tree: contexts by bytes live at the peak, each split by category.
        assert column_titles(tab) == [
            "Name",
            "Live at peak \u25be",
            "Self",
            "parameter",
            "gradient",
            "optimizer state",
            "saved for backward",
            "temporary",
        ]
        assert shown_rows(tab) == ROWS
        root_bar = tab.locator(".rows .row").first.locator(".seg-cat")
        assert root_bar.evaluate_all("s => s.map((e) => e.dataset.category)") == [
            "parameter",
            "gradient",
            "optimizer_state",
            "saved_for_backward",
            "temporary",
        ]
        # The timeline marks the peak with its step and phase.
        assert tab.locator(".memory-chart .peak-label").text_content() == (
            "peak 41.0 MiB \u00b7 step 6 \u00b7 optimizer at 15.00 ms"
        )
        assert tab.locator(".memory-chart polyline.timeline-line").count() == 1
        page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-memory.png"))
        # The peak's link opens its node and selects it; the details panel shows it.
        tab.locator("a.peak-link").click()
        tab.locator(".row.selected.peak-row .label", has_text="aten::add_").wait_for()
        tab.locator(".details .label", has_text="aten::add_").wait_for()
        peak_row = shown_rows(tab)[3]
        assert peak_row == ["aten::add_", "1.0 MiB", "1.0 MiB", *[DASH] * 4, "1.0 MiB"]
        # A header click orders the rows by that category.
        tab.locator(".cell.head", has_text="gradient").click()
        tab.locator(".cell.head.sorted", has_text="gradient").wait_for()
        top = [r[0] for r in shown_rows(tab)]
        assert top[:2] == ["steps 5\u20136", "backward"]
        # Shares of the peak instead of bytes.
        tab.locator(".toolbar input[type=checkbox]").check()
        assert shown_rows(tab)[0][1:3] == ["100.0%", "0.0%"]
        tab.locator(".toolbar input[type=checkbox]").uncheck()
        # Another device: its own header, tree and categories.
        tab.locator("select[aria-label=Device]").select_option("cpu")
        tab.locator(".row .label", has_text="dataloader").wait_for()
        assert tab.locator(".memory-line").inner_text() == CPU_LINE
        assert column_titles(tab)[3:] == ["input"]
        assert shown_rows(tab)[:2] == [
            ["steps 5\u20136", "1.0 MiB", "0 B", "1.0 MiB"],
            ["dataloader", "1.0 MiB", "0 B", "1.0 MiB"],
        ]
        # A window without memory says how to collect it.
        tab.locator("select[aria-label=Run]").select_option("plain")
        tab.locator(".memory-none").wait_for()
        assert tab.locator(".memory-none").inner_text() == NOT_COLLECTED
        assert tab.locator(".rows").count() == 0
    assert errors == []
