"""Run names hold no control character: a run is a directory, and a name with
a newline, an escape or a bidi override (``--run "a\\nb"``) made one that
lists as something else. Every entry point builds a `ProfilerConfig`, which
refuses such a name by field, the character shown escaped."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from dc_core import ProfilerConfig
from dc_core.record.config import resolve

#: Every C0 and C1 control character, DEL, and the bidi embeddings, overrides and isolates.
CONTROLS = [
    chr(c)
    for c in [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
]


def _escaped(char: str) -> str:
    return repr(char)[1:-1]  # '\\n', '\\x1b', '\\u202e'


@pytest.mark.parametrize("char", CONTROLS, ids=_escaped)
def test_the_config_refuses_a_run_name_with_a_control_character(char):
    with pytest.raises(ValueError) as caught:
        ProfilerConfig(run=f"exp{char}1/eval")
    message = str(caught.value)
    assert message.startswith("run must be a relative name") and _escaped(char) in message
    assert char not in message  # shown escaped, never as itself


@pytest.mark.parametrize("char", ["\n", "\x1b", "\x85", "\u202e", "\u2066"], ids=_escaped)
def test_deepcontext_config_cannot_bring_one_in(monkeypatch, char):
    monkeypatch.setenv("DEEPCONTEXT_CONFIG", json.dumps({"run": f"a{char}b"}))
    with pytest.raises(ValueError) as caught:
        resolve()
    message = str(caught.value)
    assert message.startswith("DEEPCONTEXT_CONFIG (inline JSON): run must be a relative name")
    assert f"contains the control character '{_escaped(char)}'" in message and char not in message


def test_names_that_only_look_odd_are_kept():
    for run in ("exp-1/eval", "échelle", "日本語", "a b", "run.v2"):
        assert ProfilerConfig(run=run).run == run


def _deepcontext_run(tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dc_core", "run", "--no-report", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_deepcontext_run_refuses_a_run_name_with_a_newline_and_runs_nothing(tmp_path):
    (tmp_path / "t.py").write_text("open('ran', 'w').close()\n")
    done = _deepcontext_run(tmp_path, "--run", "a\nb", "t.py")
    assert done.returncode == 2, done.stderr
    # `deepcontext run` names its runs itself; a --run, were it taken, goes through the config's check
    assert "unrecognized arguments: --run" in done.stderr or (
        "run must be" in done.stderr and "\\n" in done.stderr
    )
    assert not (tmp_path / "ran").exists() and not (tmp_path / "deepcontext").exists()


def test_deepcontext_run_names_a_run_after_a_script_without_its_control_characters(tmp_path):
    script = tmp_path / "tr\x1b[2Jain\u202e.py"
    script.write_text("open('ran', 'w').close()\n")
    done = _deepcontext_run(tmp_path, script.name)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran").exists()
    [run] = [p.name for p in (tmp_path / "deepcontext").iterdir()]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_tr-2Jain", run), repr(run)
