"""The trainer helper the callbacks share, driven as a trainer would, no framework:
placement, optimizer steps under accumulation, eval windows, skipped machinery."""

from __future__ import annotations

import os
import sys

import pytest

from dc_core.collect import ownfiles
from dc_core.record import trainer as trainer_mod
from dc_core.record.trainer import TrainerSession
from dc_core.store.logdir import load_profiles

QUIET = dict(cpu_sampling_hz=0, system_interval_ms=0)


def _trainer(**overrides):
    return TrainerSession(
        None,
        {**QUIET, **overrides},
        adapter=lambda: None,
        framework="python",
        default_phase="forward",
    )


def test_the_run_goes_beside_the_trainers_scalars_unless_the_user_names_it(tmp_path):
    beside = {"logdir": str(tmp_path / "lightning_logs"), "run": "version_0"}
    asked = []

    def place():
        asked.append(1)
        return beside

    placed = _trainer()
    placed.begin(rank=3, world_size=4, place=place)
    session = placed.session
    assert (session.config.logdir, session.config.run, session.rank, session.world_size) == (
        beside["logdir"],
        "version_0",
        3,
        4,
    )
    placed.close()
    named_run = _trainer(run="mine")
    named_run.begin(rank=0, world_size=1, place=place)
    assert (named_run.session.config.logdir, named_run.session.config.run) == (
        beside["logdir"],
        "mine",
    )
    named_run.close()
    assert len(asked) == 2
    named = _trainer(logdir=str(tmp_path / "prof"))
    named.begin(rank=0, world_size=1, place=place)
    assert (
        named.user_logdir
        and named.session.config.logdir == str(tmp_path / "prof")
        and len(asked) == 2
    )
    # a second start while one runs: the same session
    named.begin(rank=1, world_size=2, place=place)
    assert named.session.rank == 0
    named.close()
    assert named.session is None and named.written == []


def test_a_step_spans_its_micro_batches_and_ends_when_the_optimizer_steps(tmp_path):
    profiling = _trainer(logdir=str(tmp_path), steps={"start": 1, "count": 2})
    profiling.begin(rank=0, world_size=1, place=dict)
    for global_step in range(4):
        # Lightning's hooks: batch start, batch end with the counter after
        for micro_batch in range(2):
            profiling.step_begin(global_step)
            with profiling.session.phase("forward"):
                sum(range(100))
            profiling.step_end(global_step + micro_batch)
    profiling.close()
    (profile,), errors = load_profiles(tmp_path)
    assert errors == [] and profile.steps == (1, 3) and len(profile.step_times_ns) == 2
    assert [p.name for p in profiling.written] == ["steps-1-2.pb"]


def test_eval_batches_are_their_own_windows_only_with_profile_eval(tmp_path):
    for wanted in (False, True):
        profiling = _trainer(
            logdir=str(tmp_path / str(wanted)), steps={"start": 0, "count": 1}, profile_eval=wanted
        )
        profiling.begin(rank=0, world_size=1, place=dict)
        assert profiling.eval_wanted is wanted
        profiling.step_begin(0)
        profiling.step_end()  # no counter (Hugging Face): the step ends
        for _ in range(3):
            profiling.eval_begin("validation")
            profiling.eval_end()
        profiling.close()
        runs = {p.relative_to(tmp_path / str(wanted)).parts[0] for p in profiling.written}
        assert runs == ({"plugins", "validation"} if wanted else {"plugins"})


def test_each_session_skips_the_named_frameworks_machinery(tmp_path, monkeypatch):
    skipped = []
    monkeypatch.setattr(
        trainer_mod, "skip_framework_files", lambda c, *names: skipped.append(names)
    )
    profiling = TrainerSession(
        None, {**QUIET, "profile_eval": True}, adapter=lambda: None, machinery=("lightning",)
    )
    profiling.begin(rank=0, world_size=1, place=lambda: {"logdir": str(tmp_path)})
    profiling.eval_begin("test")  # the eval session is made by the same factory
    profiling.close()
    assert skipped == [("lightning",), ("lightning",)]


def test_a_frameworks_model_subpackages_are_not_its_machinery(tmp_path, monkeypatch):
    root = tmp_path / "dcfakefw"
    for path in (
        "__init__.py",
        "trainer/loop.py",
        "fabric/strategy.py",
        "pytorch/core.py",
        "pytorch/loops/fit.py",
        "pytorch/demos/model.py",
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    (tmp_path / "dcfakeplain").mkdir()
    (tmp_path / "dcfakeplain" / "__init__.py").write_text("")
    (tmp_path / "dcfakeone.py").write_text("")  # a module of one file (typing_extensions)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(
        ownfiles.FRAMEWORK_PACKAGES,
        "fake",
        ("dcfakefw", "dcfakeplain", "dcfake_missing", "dcfakeone"),
    )
    prefixes = ownfiles.framework_prefixes("fake")
    assert "dcfakefw" not in sys.modules  # found, not imported
    covered = lambda rel: str(tmp_path / rel).startswith(tuple(prefixes))
    assert all(
        map(
            covered,
            (
                "dcfakefw/__init__.py",
                "dcfakefw/trainer/loop.py",
                "dcfakefw/fabric/strategy.py",
                "dcfakefw/pytorch/core.py",
                "dcfakefw/pytorch/loops/fit.py",
                "dcfakeplain/__init__.py",
            ),
        )
    )
    assert not covered("dcfakefw/pytorch/demos/model.py")
    assert str(tmp_path / "dcfakeplain") + os.sep in prefixes  # no model code in it: one prefix
    assert str(tmp_path / "dcfakeone.py") in prefixes
    with pytest.raises(KeyError):
        ownfiles.framework_prefixes("no such framework")
