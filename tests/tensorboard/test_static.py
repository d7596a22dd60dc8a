"""The tab's ES modules checked without a browser: the number formatter
against the CLI's (in Node, when it is installed; the browser test runs the
same cases in Chromium), and the vocabulary that only /runs may bring."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from dc_core.model import kinds
from dc_core.model.report import format_value

STATIC = resources.files("dc_core.tensorboard").joinpath("static")

#: Values where a formatter can go wrong: scale boundaries, halfway cases
#: (Python rounds a tie to even, JS's toFixed away from zero), negatives.
FORMAT_CASES = [
    0, 1, -1, 0.5, 1.5, 2.5, -2.5, -0.4, 999, 1000, 1005, 1125, 1135, 1250, -1250, 1550, 9999, 12_345,
    999_999, 1_000_000, 1_005_000, 1_015_000, 1_250_000, 1_350_000, 4_125_000, 123_456_789, 1_234_500_000,
    1023, 1024, 1280, 3_932_160, 1 << 30, 10**12, -(10**10), 37.5, 0.125,
]


def expected_formats() -> dict[str, list[str]]:
    """``format_value`` of every case, per unit (a metric of that unit names it)."""
    by_unit = {unit: metric for metric, unit in kinds.UNITS.items()}
    return {unit: [format_value(v, metric) for v in FORMAT_CASES] for unit, metric in by_unit.items()}


#: A module script printing formatNumber of every case per unit as JSON.
FORMAT_SCRIPT = """
import { formatNumber } from "%s";
const [cases, units] = %s;
console.log(JSON.stringify(Object.fromEntries(units.map((u) => [u, cases.map((v) => formatNumber(v, u))]))));
"""


def test_js_numbers_round_like_the_cli():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not installed (the browser test runs the same cases in Chromium)")
    expected = expected_formats()
    assert set(expected) == {"ns", "bytes", "1"}
    module = Path(str(STATIC.joinpath("format.js"))).as_uri()
    script = FORMAT_SCRIPT % (module, json.dumps([FORMAT_CASES, list(expected)]))
    out = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == expected
    # The cases do hold the halfway values where toFixed alone would differ:
    assert expected["ns"][FORMAT_CASES.index(1125)] == "1.12 µs" and expected["1"][FORMAT_CASES.index(2.5)] == "2"


def test_the_page_lists_no_vocabulary_itself():
    """Metric names, units, labels and severities reach the JS only through
    /runs (`kinds.vocabulary()`); a list of them in a module would drift."""
    for path in STATIC.iterdir():
        if not path.name.endswith(".js"):
            continue
        text = path.read_text()
        names = [*kinds.SEVERITIES, *(label for _, label in kinds.METRICS.values()),
                 *(m for m in kinds.METRICS if m != "count")]  # the tree's calls column names its metric
        for name in names:  # as a string or an object key
            assert not re.search(rf"""["'`]{name}["'`]|\b{name}\s*:""", text), (path.name, name)
        assert "SEVERITY_ORDER" not in text and "METRIC_NAMES" not in text and "UNITS" not in text
