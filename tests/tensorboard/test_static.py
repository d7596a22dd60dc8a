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

from dc_core.cli.present import format_value
from dc_core.model import kinds

STATIC = resources.files("dc_core.tensorboard").joinpath("static")

#: Values where a formatter can go wrong: scale boundaries, halfway cases
#: (Python rounds a tie to even, JS's toFixed away from zero), negatives.
FORMAT_CASES = [
    0,
    1,
    -1,
    0.5,
    1.5,
    2.5,
    -2.5,
    -0.4,
    999,
    1000,
    1005,
    1125,
    1135,
    1250,
    -1250,
    1550,
    9999,
    12_345,
    999_999,
    1_000_000,
    1_005_000,
    1_015_000,
    1_250_000,
    1_350_000,
    4_125_000,
    123_456_789,
    1_234_500_000,
    1023,
    1024,
    1280,
    3_932_160,
    1 << 30,
    10**12,
    -(10**10),
    37.5,
    0.125,
]


def expected_formats() -> dict[str, list[str]]:
    """``format_value`` of every case, per unit (a metric of that unit names it)."""
    by_unit = {unit: metric for metric, unit in kinds.UNITS.items()}
    return {
        unit: [format_value(v, metric) for v in FORMAT_CASES] for unit, metric in by_unit.items()
    }


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
    out = subprocess.run(
        [node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == expected
    # The cases do hold the halfway values where toFixed alone would differ:
    assert (
        expected["ns"][FORMAT_CASES.index(1125)] == "1.12 µs"
        and expected["1"][FORMAT_CASES.index(2.5)] == "2"
    )


def test_the_page_lists_no_vocabulary_itself():
    """Metric names, units, labels and severities reach the JS only through
    /runs (`kinds.vocabulary()`); a list of them in a module would drift."""
    for path in STATIC.iterdir():
        if not path.name.endswith(".js"):
            continue
        text = path.read_text()
        # the tree's calls column names its metric
        names = [
            *kinds.SEVERITIES,
            *(label for _, label in kinds.METRICS.values()),
            *(m for m in kinds.METRICS if m != "count"),
        ]
        for name in names:  # as a string or an object key
            assert not re.search(rf"""["'`]{name}["'`]|\b{name}\s*:""", text), (path.name, name)
        assert "SEVERITY_ORDER" not in text and "METRIC_NAMES" not in text and "UNITS" not in text


def run_js(script: str, **modules: str):
    """The JSON a module script prints; ``modules`` maps a name used in the
    script as ``{name}`` to a static file whose URL replaces it."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not installed (the browser test drives the same modules in Chromium)")
    for name, file in modules.items():
        script = script.replace("{" + name + "}", Path(str(STATIC.joinpath(file))).as_uri())
    out = subprocess.run(
        [node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_flame_labels_are_cut_in_the_middle_or_left_out():
    """At 6 px a character: whole when it fits, else the namespace and the end
    of the name around an ellipsis; never a bare prefix like "aten…", and
    nothing where not even three characters each side fit."""
    got = run_js(
        """
        import { fitLabel } from "{layout}";
        const measure = (t) => 6 * t.length;
        const name = "aten::convolution_backward";
        console.log(JSON.stringify([160, 120, 114, 60, 42, 41].map((w) => fitLabel(name, w, measure))));
    """,
        layout="flamelayout.js",
    )
    # 7 characters at 42 px; less than that shows nothing
    assert got == [
        "aten::convolution_backward",
        "aten::conv\u2026_backward",
        "aten::con\u2026_backward",
        "aten:\u2026ward",
        "ate\u2026ard",
        "",
    ]


#: A small flame answer: root 1 with children 2 (heavier, first) and 3; 2 has 4.
FLAME_NODES = [
    {"id": 1, "parent": -1, "incl": 100, "label": "steps 5-7"},
    {"id": 2, "parent": 1, "incl": 60, "label": "forward"},
    {"id": 4, "parent": 2, "incl": 60, "label": "aten::mm"},
    {"id": 3, "parent": 1, "incl": 40, "label": "backward"},
]


def test_flame_layout_and_arrow_keys():
    got = run_js(
        """
        import { layout, neighbour, matching, locate, frameAt } from "{layout}";
        const g = layout(%s);
        const keys = ["ArrowDown", "ArrowUp", "ArrowLeft", "ArrowRight"];
        const moves = (o) => Object.fromEntries([1, 2, 3, 4].map((id) => [id, keys.map((k) => neighbour(g, id, k, o))]));
        console.log(JSON.stringify({
          place: g.placed.map((p) => [p.node.id, p.x, p.w, p.depth]), depth: g.depth,
          icicle: moves("icicle"), flame: moves("flame"), match: [...matching(g.placed.map((p) => p.node), "WARD")],
          spot: locate(g, 99, [{ id: 1 }, { id: 3 }]).node.id, at: frameAt(g, 0.7, 1).node.id,
        }));
    """
        % json.dumps(FLAME_NODES),
        layout="flamelayout.js",
    )
    assert (
        got["place"] == [[1, 0, 1, 0], [2, 0, 0.6, 1], [4, 0, 0.6, 2], [3, 0.6, 0.4, 1]]
        and got["depth"] == 3
    )
    # down, up, left, right: down is the heaviest child in an icicle, up in a flame graph
    assert got["icicle"] == {
        "1": [2, 1, 1, 1],
        "2": [4, 1, 2, 3],
        "3": [3, 1, 2, 3],
        "4": [4, 2, 4, 4],
    }
    assert got["flame"] == {
        "1": [1, 2, 1, 1],
        "2": [1, 4, 2, 3],
        "3": [1, 3, 2, 3],
        "4": [2, 4, 4, 4],
    }
    assert got["match"] == [2, 3]
    assert got["spot"] == 3 and got["at"] == 3  # a root too small for the whole graph: its ancestor


def test_axis_ticks_use_one_unit_from_the_range():
    """The step-time axis of a 1.15 s step reads 0 s .. 1.5 s, not "0 ns" under "1.15 s"."""
    got = run_js(
        """
        import { niceTicks } from "{axis}";
        const cases = [[1.15e9, "ns"], [30e6, "ns"], [0.3, "s"], [200 * 2 ** 20, "bytes/s"], [100, "%"], [1234, "1"]];
        console.log(JSON.stringify(cases.map(([m, u]) => { const a = niceTicks(m, u); return [a.top, a.ticks.map((t) => t.label)]; })));
    """,
        axis="axis.js",
    )
    assert got == [
        [1.5e9, ["0 s", "0.5 s", "1 s", "1.5 s"]],
        [30e6, ["0 ms", "10 ms", "20 ms", "30 ms"]],
        [0.3, ["0 ms", "100 ms", "200 ms", "300 ms"]],
        [200 * 2**20, ["0 MiB/s", "50 MiB/s", "100 MiB/s", "150 MiB/s", "200 MiB/s"]],
        [100, ["0%", "25%", "50%", "75%", "100%"]],
        [1500, ["0k", "0.5k", "1k", "1.5k"]],
    ]


def test_rates_are_written_per_second():
    got = run_js(
        """
        import { formatNumber } from "{format}";
        console.log(JSON.stringify([formatNumber(100 * 2 ** 20, "bytes/s"), formatNumber(512, "bytes/s")]));
    """,
        format="format.js",
    )
    assert got == ["100.0 MiB/s", "512 B/s"]


def test_address_keeps_tensorboards_parts_and_ours():
    got = run_js(
        """
        import { readState, writeState } from "{url}";
        const hash = writeState("#deepcontext&tagFilter=x&dc.node=3", { run: "nested/run b", rank: 0, window: "5-8", view: "flame", node: 12, zoom: null });
        console.log(JSON.stringify({ hash, back: readState(hash), foreign: readState("#scalars&run=x&dc.bogus=1") }));
    """,
        url="urlstate.js",
    )
    assert (
        got["hash"]
        == "#deepcontext&tagFilter=x&dc.run=nested%2Frun%20b&dc.rank=0&dc.window=5-8&dc.view=flame&dc.node=12"
    )
    assert got["back"] == {
        "run": "nested/run b",
        "rank": "0",
        "window": "5-8",
        "view": "flame",
        "node": "12",
    }
    assert got["foreign"] == {}


def test_the_strip_shows_the_three_findings_that_save_most():
    got = run_js(
        """
        import { topByGain, gainText } from "{findings}";
        const f = [{ rule: "a", gain_ns: 1e6 }, { rule: "b", gain_ns: null }, { rule: "c", gain_ns: 5e6 },
                   { rule: "d", gain_ns: 2e5 }, { rule: "e", gain_ns: 3e6 }];
        console.log(JSON.stringify([topByGain(f).map((x) => x.rule), gainText(5e6), gainText(2e5), gainText(null)]));
    """,
        findings="findings.js",
    )
    assert got == [
        ["c", "e", "a"],
        "saves \u2248 5.0 ms per step",
        "saves \u2248 200 µs per step",
        "saves none estimated",
    ]


def test_a_memory_findings_saving_is_bytes_at_the_peak_and_ranks_after_time():
    got = run_js(
        """
        import { topByGain, gainText } from "{findings}";
        const f = [{ rule: "none", gain_ns: null }, { rule: "small", gain_ns: null, evidence: { gain_bytes: 1024 } },
                   { rule: "big", gain_ns: null, evidence: { gain_bytes: 96 * 2 ** 20 } }, { rule: "time", gain_ns: 1e3 }];
        console.log(JSON.stringify([topByGain(f, 4).map((x) => x.rule), gainText(null, 96 * 2 ** 20)]));
    """,
        findings="findings.js",
    )
    assert got == [["time", "big", "small", "none"], "saves \u2248 96.0 MiB at the peak"]
