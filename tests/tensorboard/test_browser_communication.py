"""The Communication view in a real ``tensorboard --logdir`` and headless
Chromium: per sharded module, its bar split into compute, exposed
communication and the sharding runtime, the report's columns, a module's
details on a click, and a window without collectives. In CI (``CI=true``) a
missing Chromium or Playwright fails, as for `test_browser`."""

from __future__ import annotations

from pathlib import Path

import pytest

from dc_core.store.logdir import write_profile
from dc_core.tensorboard.communication import NO_COLLECTIVES
from tests.analyzer.helpers import MS
from tests.analyzer.test_communication import fsdp_step
from tests.tensorboard.chromium import tab_page
from tests.tensorboard.conftest import make_profile
from tests.tensorboard.test_browser import ARTIFACTS


@pytest.mark.slow
def test_communication_view_in_tensorboard_and_chromium(tmp_path: Path, src: Path):
    logdir = tmp_path / "logs"
    write_profile(fsdp_step(big_exposed=60 * MS), logdir, "fsdp")
    write_profile(make_profile(src, 0, (5, 8)), logdir, "plain")
    view = {"run": "fsdp", "view": "communication"}
    with tab_page(logdir, tmp_path, view) as (page, tab, errors):
        tab.locator(".comm-row").first.wait_for()
        assert tab.locator("button.tab.active").inner_text() == "Communication"
        assert tab.locator(".comm-table th").all_inner_texts()[2:] == [
            "compute",
            "exposed comm",
            "sharding runtime",
            "comm time",
            "bytes moved",
        ]
        rows = tab.locator(".comm-row").evaluate_all(
            "rows => rows.map((r) => [...r.querySelectorAll('td')].map((c) => c.textContent))"
        )
        # the report's row for each module, most exposed first (per step)
        assert rows == [
            ["blocks.1", "", "30.00 ms", "41.33 ms", "2.33 ms", "41.33 ms", "192.0 MiB"],
            ["blocks.0", "", "10.00 ms", "333.33 \u00b5s", "0 ns", "333.33 \u00b5s", "1.0 KiB"],
        ]
        # each bar: compute, exposed, runtime, in proportion, the longest full width
        parts = tab.locator(".comm-row").first.locator(".seg-cat")
        assert parts.evaluate_all("s => s.map((e) => e.dataset.part)") == [
            "compute_ns",
            "exposed_ns",
            "runtime_ns",
        ]
        widths = tab.locator(".comm-row .comm-bar .stack").evaluate_all(
            "s => s.map((e) => e.getBoundingClientRect().width / e.parentElement.getBoundingClientRect().width)"
        )
        whole = 30 + 124 / 3 + 7 / 3
        assert widths[0] == pytest.approx(1.0, abs=0.01)
        assert widths[1] == pytest.approx((10 + 1 / 3) / whole, abs=0.01)
        page.screenshot(path=str(ARTIFACTS / "tensorboard-tab-communication.png"))
        # a module's name opens its details
        tab.locator(".comm-module a", has_text="blocks.1").click()
        tab.locator(".details .label", has_text="blocks.1").wait_for()
        # a window without collectives says so
        tab.locator("select[aria-label=Run]").select_option("plain")
        tab.locator(".comm-none").wait_for()
        assert tab.locator(".comm-none").inner_text() == NO_COLLECTIVES
    assert errors == []
