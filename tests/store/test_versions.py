"""Files written by an earlier schema still read, with their control facts
typed; ``env`` holds environment facts only; and no reader changes what it
reads (the file's bytes and the decoded profile's data)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from dc_core.analyzer import findings_of
from dc_core.cli import main
from dc_core.store import profile_pb2
from dc_core.store.logdir import read_profile
from dc_core.store.profile import (
    SCHEMA_VERSION,
    V1_ENV_KEYS,
    ProfileError,
    decode,
    encode,
    mark_pending,
)

FIXTURES = Path(__file__).parent / "fixtures"


def test_a_version_1_pending_window_reads_with_typed_control_facts():
    # a real torch window, planned 1-4, ended after step 2
    p = read_profile(FIXTURES / "v1-pending.pb")
    assert p.analysis_pending and p.findings == []
    assert p.analyzer_overrides == {"dataloader_bottleneck.enabled": 0.0}
    assert p.planned_window == (1, 4) and p.first_step == 0 and p.step_source == ""
    assert not set(V1_ENV_KEYS) & set(p.env) and p.env["framework"] == "torch"
    assert [f["rule"] for f in findings_of(p)] == ["hotspot"]  # analysed with the stored overrides


def test_a_version_1_analysed_window_reads_with_its_findings_and_step_source():
    p = read_profile(FIXTURES / "v1-analysed.pb")
    assert not p.analysis_pending and p.analyzer_overrides == {} and p.planned_window is None
    assert p.first_step == 1 and p.step_source == "a time range: after 0.5 s for 1 s"
    assert [f["rule"] for f in p.findings] == [f["rule"] for f in findings_of(p)] and p.findings
    assert not set(V1_ENV_KEYS) & set(p.env)


def test_a_version_1_files_damaged_overrides_read_as_none_with_a_warning(caplog):
    msg = profile_pb2.Profile.FromString((FIXTURES / "v1-pending.pb").read_bytes())
    msg.env["analyzer_overrides"] = '{"dataloader_bottleneck.enabled": 0'
    p = decode(msg.SerializeToString(), "old.pb")
    assert (
        p.analysis_pending
        and p.analyzer_overrides == {}
        and "old.pb has unreadable analyzer overrides" in caplog.text
    )


def test_typed_control_facts_round_trip_and_are_written_in_the_current_version():
    p = read_profile(FIXTURES / "v1-pending.pb")
    p.step_source, p.first_step = "a time range: after 2 s for 1 s", 7
    mark_pending(p, {"host_sync.enabled": 0})
    data = encode(p)
    msg = profile_pb2.Profile.FromString(data)
    assert msg.version == SCHEMA_VERSION == 2 and not set(V1_ENV_KEYS) & set(msg.env)
    back = decode(data)
    assert (
        back.analysis_pending,
        back.analyzer_overrides,
        back.planned_window,
        back.step_source,
        back.first_step,
    ) == (True, {"host_sync.enabled": 0.0}, (1, 4), "a time range: after 2 s for 1 s", 7)
    p.first_step = p.planned_window = None
    back = decode(encode(p))
    assert back.first_step is None and back.planned_window is None


def test_a_newer_schema_is_refused_naming_the_file():
    msg = profile_pb2.Profile.FromString((FIXTURES / "v1-pending.pb").read_bytes())
    msg.version = SCHEMA_VERSION + 1
    with pytest.raises(
        ProfileError, match=rf"future\.pb: schema version {SCHEMA_VERSION + 1} is newer"
    ):
        decode(msg.SerializeToString(), "future.pb")


def _data(p) -> dict:
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.compare}


@pytest.mark.parametrize("fixture", ["v1-pending.pb", "v1-analysed.pb"])
def test_readers_never_change_what_they_read(tmp_path, capsys, fixture):
    run = tmp_path / "run" / "plugins" / "deepcontext" / "0-vm"
    run.mkdir(parents=True)
    shutil.copy(FIXTURES / fixture, run / "steps-1-3.pb")
    file = run / "steps-1-3.pb"
    before = file.read_bytes()
    profile = read_profile(file)
    data = _data(profile)
    findings_of(profile)
    findings_of(profile)
    assert _data(profile) == data  # memoised apart from the profile's data
    for argv in (
        ["report", str(tmp_path)],
        ["report", str(tmp_path), "--json"],
        ["diff", str(file), str(file), "--json"],
        ["export", str(tmp_path), "--format", "speedscope", "--out", str(tmp_path / "out.json")],
    ):
        assert main(argv) == 0, argv
    assert "optimizer" in capsys.readouterr().out and file.read_bytes() == before
    pytest.importorskip("tensorboard")
    from tensorboard.plugins.base_plugin import TBContext

    from dc_core.tensorboard.plugin import DeepContextPlugin
    from dc_core.tensorboard.store import ProfileStore
    from tests.tensorboard.conftest import Api

    api = Api(
        DeepContextPlugin(
            TBContext(logdir=str(tmp_path)), store=ProfileStore(tmp_path, listing_ttl_s=0)
        )
    )
    where = {"run": "run", "rank": 0, "window": "1-4"}
    shown = api.json("/window", **where)
    assert (
        shown["label"].startswith("steps 1\u20133")
        if fixture == "v1-pending.pb"
        else shown["label"]
    )
    api.json("/children", node=0, metric="cpu_time_ns", **where)
    assert file.read_bytes() == before
