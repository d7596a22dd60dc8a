"""pprof export, checked at the protobuf level (Go's pprof is not needed): the
sample types, the default one, the window's duration and the values per path."""

from __future__ import annotations

import gzip
from collections import Counter

import pytest

from dc_core.export import exporter, pprof_pb2
from tests.exports.readers import report_paths, report_totals


def read(data: bytes) -> tuple[pprof_pb2.Profile, list[str]]:
    """The message and its string table, checked as pprof readers check them."""
    msg = pprof_pb2.Profile()
    msg.ParseFromString(gzip.decompress(data))
    strings = list(msg.string_table)
    assert strings[0] == "" and len(set(strings)) == len(strings)
    assert all(0 <= t.type < len(strings) and 0 <= t.unit < len(strings) for t in msg.sample_type)
    assert all(len(s.value) == len(msg.sample_type) for s in msg.sample)
    return msg, strings


def path_values(
    msg: pprof_pb2.Profile, strings: list[str]
) -> dict[tuple[str, ...], dict[str, int]]:
    """Every sample's values by sample type name, keyed by its call path read root first."""
    names = {f.id: strings[f.name] for f in msg.function}
    function_of = {loc.id: loc.line[0].function_id for loc in msg.location}
    types = [strings[t.type] for t in msg.sample_type]
    out = {}
    for sample in msg.sample:
        path = tuple(names[function_of[i]] for i in reversed(sample.location_id))
        assert path not in out
        out[path] = dict(zip(types, sample.value))
    return out


@pytest.mark.parametrize("metric", ["cpu_time_ns", "count", "samples"])
def test_pprof_default_sample_type_is_the_chosen_metric(demo_profile, metric):
    """No default was set, so go tool pprof opened the last type (device_time_ns,
    "Total samples = 0") and speedscope showed a blank profile."""
    msg, strings = read(exporter("pprof")(demo_profile, metric))
    assert strings[msg.default_sample_type] == metric
    assert strings[msg.sample_type[0].type] == metric == strings[msg.period_type.type]
    types = {strings[t.type]: strings[t.unit] for t in msg.sample_type}
    assert types == {"cpu_time_ns": "nanoseconds", "count": "count", "samples": "count"}


def test_pprof_duration_is_the_windows_step_time(demo_profile):
    msg, _ = read(exporter("pprof")(demo_profile, "cpu_time_ns"))
    assert len(demo_profile.step_times_ns) == 2
    assert msg.duration_nanos == sum(demo_profile.step_times_ns) > 0
    # the whole window, setup included, was written before
    assert msg.duration_nanos != demo_profile.duration_ns
    assert msg.time_nanos == demo_profile.start_unix_ns > 0


def test_pprof_values_are_the_reports_exclusive_values_node_for_node(demo_profile):
    msg, strings = read(exporter("pprof")(demo_profile, "cpu_time_ns"))
    report = report_paths(demo_profile, "cpu_time_ns")
    assert path_values(msg, strings) == {
        path: row["excl"] for path, row in report.items() if any(row["excl"].values())
    }


def test_pprof_totals_per_sample_type_are_the_reports_totals(demo_profile):
    msg, strings = read(exporter("pprof")(demo_profile, "count"))
    totals: Counter[str] = Counter()
    for sample in msg.sample:
        for t, value in zip(msg.sample_type, sample.value):
            totals[strings[t.type]] += value
    assert totals == report_totals(demo_profile)
    assert totals["cpu_time_ns"] > 0 and totals["count"] > 0


def test_pprof_a_profile_without_step_times_keeps_the_window_duration():
    from tests.store.test_files import make_profile

    profile = make_profile()
    profile.step_times_ns, profile.duration_ns = [], 12345
    msg, _ = read(exporter("pprof")(profile, "cpu_time_ns"))
    assert msg.duration_nanos == 12345


@pytest.mark.parametrize("args, default", [([], "cpu_time_ns"), (["--metric", "count"], "count")])
def test_pprof_from_the_cli_opens_on_the_metric_asked_for(
    demo_profile, tmp_path, capsys, args, default
):
    from dc_core.cli import main
    from dc_core.store.logdir import write_profile

    write_profile(demo_profile, tmp_path / "logs")
    assert (
        main(
            [
                "export",
                str(tmp_path / "logs"),
                "--format",
                "pprof",
                "--out",
                str(tmp_path / "out"),
                *args,
            ]
        )
        == 0
    )
    (written,) = (tmp_path / "out").iterdir()
    msg, strings = read(written.read_bytes())
    assert strings[msg.default_sample_type] == default
    assert msg.duration_nanos == sum(demo_profile.step_times_ns)


@pytest.mark.parametrize("step_times, duration", [([2**62, 2**62, 2**62], 2**63 - 1), ([-5, 2], 0)])
def test_pprof_duration_of_odd_step_times_stays_an_int64(step_times, duration):
    """Step times summing past int64 made protobuf raise ValueError (found by the fuzzer)."""
    from tests.store.test_files import make_profile

    profile = make_profile()
    profile.step_times_ns = step_times
    msg, _ = read(exporter("pprof")(profile, "cpu_time_ns"))
    assert msg.duration_nanos == duration
