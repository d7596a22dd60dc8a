"""Hatchet export, opened with LLNL Hatchet itself (``GraphFrame.from_literal``)."""

from __future__ import annotations

import json

import pytest

from dc_core.export import exporter
from tests.exports.readers import report_paths, require


def graphframe(profile, metric: str):
    """The export read by Hatchet."""
    hatchet = require("hatchet")
    return hatchet.GraphFrame.from_literal(json.loads(exporter("hatchet")(profile, metric)))


def node_rows(gf) -> dict[tuple[str, ...], dict]:
    """Hatchet's dataframe row per call path of frame names."""
    rows = {}
    for node in gf.graph.traverse():
        path = tuple(n.frame["name"] for n in node.path())
        assert path not in rows
        rows[path] = gf.dataframe.loc[node].to_dict()
    return rows


@pytest.mark.parametrize("metric", ["cpu_time_ns", "count"])
def test_hatchet_tree_works_without_arguments(demo_profile, metric):
    """``gf.tree()`` failed: Hatchet's default metric column, "time", was missing."""
    gf = graphframe(demo_profile, metric)
    assert (
        gf.default_metric == "time" and "time" in gf.exc_metrics and "time (inc)" in gf.inc_metrics
    )
    text = gf.tree()
    report = report_paths(demo_profile, metric)
    for path, row in report.items():
        if len(path) == 1 or row["excl"][metric]:
            assert f"{row['excl'][metric]:.3f} {path[-1]}" in text, path
    assert "demo::grad [backward]" in text


def test_hatchet_columns_are_the_reports_numbers_node_for_node(demo_profile):
    rows = node_rows(graphframe(demo_profile, "cpu_time_ns"))
    report = report_paths(demo_profile, "cpu_time_ns")
    assert rows.keys() == report.keys()
    for path, row in rows.items():
        expected = report[path]
        assert (
            row["time"] == expected["excl"]["cpu_time_ns"]
            and row["time (inc)"] == expected["incl"]["cpu_time_ns"]
        )
        for m in demo_profile.tree.excl:
            assert (row[m], row[f"{m} (inc)"]) == (expected["excl"][m], expected["incl"][m]), (
                path,
                m,
            )


def test_hatchet_recomputes_the_same_inclusive_values(demo_profile):
    """Hatchet's own sum over each subtree agrees with the inclusive columns written."""
    gf = graphframe(demo_profile, "cpu_time_ns")
    written = gf.dataframe[gf.inc_metrics].copy()
    gf.dataframe[gf.inc_metrics] = 0  # so that what is compared is Hatchet's sums
    gf.update_inclusive_columns()
    assert (gf.dataframe[written.columns] == written).all().all()
    assert (
        gf.dataframe["time (inc)"].loc[gf.graph.roots].sum()
        == demo_profile.tree.inclusive("cpu_time_ns")[0]
    )
