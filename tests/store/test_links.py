"""Readers follow no link out of the logdir: a profile file, a rank directory
or a ``plugins/deepcontext`` that is a symlink to elsewhere was listed and read
(the plugin served it whole, and a link to /etc/passwd was opened); links that
stay inside the logdir work as their targets."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
from pathlib import Path

import pytest

from dc_core.cli import main
from dc_core.store.logdir import (
    OutwardLink,
    find_profiles,
    outward_message,
    read_profile,
    write_profile,
)
from dc_core.store.profile import ProfileError
from tests.reliability.test_readers import model_profile

PLUGIN = Path("plugins") / "deepcontext"
#: Where `linked_logdir` puts each link, relative to the logdir, and whether it leads out.
OUTWARD = {
    "run/plugins/deepcontext/0-node-a/steps-9-9.pb": "a profile outside",
    "run/plugins/deepcontext/0-node-a/steps-11-11.pb": "/etc/passwd",
    "run/plugins/deepcontext/1-node-b": "a rank directory outside",
    "away/plugins/deepcontext": "a plugins/deepcontext outside",
}
INWARD = {
    "run/plugins/deepcontext/0-node-a/steps-8-9.pb": "a profile of another run of the logdir",
    "run/plugins/deepcontext/3-node-d": "a rank directory kept elsewhere in the logdir",
    "moved/plugins/deepcontext": "a plugins/deepcontext kept elsewhere in the logdir",
}


def linked_logdir(tmp_path: Path) -> tuple[Path, Path]:
    """A logdir holding one real profile (run ``run``, rank 0, steps 5-7), the
    links of `OUTWARD` and `INWARD`, and beside it the directory they lead out
    to. Returns (logdir, outside)."""
    root, outside = tmp_path / "logs", tmp_path / "outside"
    write_profile(model_profile(0), root, "run")
    rank0 = root / "run" / PLUGIN / "0-node-a"
    away = write_profile(model_profile(0, (9, 10), scale=7), outside, "secret")
    write_profile(model_profile(1, scale=7), outside, "secret")
    os.symlink(away, rank0 / "steps-9-9.pb")
    os.symlink("/etc/passwd", rank0 / "steps-11-11.pb")
    os.symlink(outside / "secret" / PLUGIN / "1-node-a", root / "run" / PLUGIN / "1-node-b")
    (root / "away" / "plugins").mkdir(parents=True)
    os.symlink(outside / "secret" / PLUGIN, root / "away" / PLUGIN)
    # inward: relative and absolute targets
    write_profile(model_profile(0, (8, 10)), root, "kept8")
    os.symlink(
        Path("..", "..", "..", "..", "kept8", PLUGIN, "0-node-a", "steps-8-9.pb"),
        rank0 / "steps-8-9.pb",
    )
    write_profile(model_profile(3, scale=2), root / "stash", "kept")
    os.symlink(root / "stash" / "kept" / PLUGIN / "3-node-a", root / "run" / PLUGIN / "3-node-d")
    (root / "moved" / "plugins").mkdir(parents=True)
    os.symlink(Path("..") / ".." / "stash" / "kept" / PLUGIN, root / "moved" / PLUGIN)
    return root, outside


def listed(files) -> set[tuple[str, int, str, tuple[int, int]]]:
    return {(f.run, f.rank, f.host, f.steps) for f in files}


#: What `find_profiles` lists in `linked_logdir`: the real file and the inward links.
EXPECTED = {
    ("run", 0, "node-a", (5, 8)),
    ("run", 0, "node-a", (8, 10)),
    ("run", 3, "node-d", (5, 8)),
    ("kept8", 0, "node-a", (8, 10)),
    ("moved", 3, "node-a", (5, 8)),
    ("stash/kept", 3, "node-a", (5, 8)),
}


def test_links_out_of_the_logdir_are_not_listed_and_are_named(tmp_path):
    root, outside = linked_logdir(tmp_path)
    outward: list[OutwardLink] = []
    files = find_profiles(root, outward)
    assert listed(files) == EXPECTED
    assert not any(str(outside) in os.path.realpath(f.path) for f in files)
    assert {link.path.relative_to(root).as_posix() for link in outward} == set(OUTWARD)
    targets = {link.path.name: link.target for link in outward}
    assert targets["steps-11-11.pb"] == os.path.realpath("/etc/passwd")
    assert targets["1-node-b"] == str((outside / "secret" / PLUGIN / "1-node-a").resolve())


def test_without_a_list_the_links_are_logged_in_one_warning(tmp_path, caplog):
    root, _ = linked_logdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="deepcontext"):
        assert listed(find_profiles(root)) == EXPECTED
    [record] = [r for r in caplog.records if "out of the logdir" in r.getMessage()]
    message = record.getMessage()
    assert "not following 4 links out of the logdir" in message
    assert "'run/plugins/deepcontext/0-node-a/steps-11-11.pb' -> '/etc/passwd'" in message


def test_the_message_counts_and_shows_the_first_few_escaped(tmp_path):
    links = [OutwardLink(tmp_path / f"r{i}\x1b[2J", "/t\u202e") for i in range(8)]
    message = outward_message(links, tmp_path, shown_links=2)
    assert message == (
        f"not following 8 links out of the logdir {str(tmp_path)!r}: "
        "'r0\\x1b[2J' -> '/t\\u202e', 'r1\\x1b[2J' -> '/t\\u202e' and 6 more"
    )


def test_a_logdir_given_as_a_link_is_resolved_first(tmp_path):
    root, _ = linked_logdir(tmp_path)
    named = tmp_path / "latest"
    os.symlink(root, named)
    outward: list[OutwardLink] = []
    files = find_profiles(named, outward)
    assert listed(files) == EXPECTED and len(outward) == len(OUTWARD)
    # paths as the user named them
    assert all(str(f.path).startswith(str(named) + os.sep) for f in files)
    assert read_profile(files[0]).tree.frames  # and readable


def test_a_file_swapped_for_an_outward_link_after_listing_is_not_read(tmp_path):
    root, outside = linked_logdir(tmp_path)
    [file] = [
        f for f in find_profiles(root, []) if f.steps == (5, 8) and f.run == "run" and f.rank == 0
    ]
    file.path.unlink()
    os.symlink(next((outside / "secret" / PLUGIN / "1-node-a").iterdir()), file.path)
    with pytest.raises(ProfileError, match="resolves outside the logdir; not read") as caught:
        read_profile(file)
    assert caught.value.file == str(file.path)
    assert read_profile(file.path).rank == 1  # a path named directly is the user's own choice


def test_a_rank_directory_swapped_after_listing_is_not_read(tmp_path):
    root, outside = linked_logdir(tmp_path)
    [file] = [f for f in find_profiles(root, []) if f.run == "run" and f.rank == 3]
    real = file.path.parent
    real.unlink()  # the inward link, replaced by one out
    os.symlink(outside / "secret" / PLUGIN / "0-node-a", real)
    os.rename(real / "steps-9-9.pb", real / file.path.name)
    with pytest.raises(ProfileError, match="resolves outside the logdir"):
        read_profile(file)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def test_report_skips_an_outward_link_by_name_and_reads_an_inward_one(tmp_path):
    root, _ = linked_logdir(tmp_path)
    status, out, err = _cli(["report", str(root), "--json"])
    assert status == 0, err
    shown = {(p["run"], p["rank"], tuple(p["steps"])) for p in json.loads(out)["profiles"]}
    # the inward links read
    assert shown == {(run, rank, steps) for run, rank, _, steps in EXPECTED}
    flat = err.replace("\n", "")
    assert flat.startswith("warning: not following 4 links out of the logdir")
    assert "'run/plugins/deepcontext/0-node-a/steps-11-11.pb' -> '/etc/passwd'" in flat
    assert (
        "'away/plugins/deepcontext' -> " in flat
        and "passwd" not in out
        and "root:" not in out + err
    )


@pytest.mark.parametrize(
    "command", [["analyze", "--dry-run", "--json"], ["export", "--format", "speedscope"]]
)
def test_analyze_and_export_skip_it_too(tmp_path, command):
    root, outside = linked_logdir(tmp_path)
    argv = [command[0], str(root), *command[1:]] + (
        ["--out", str(tmp_path / "out")] if command[0] == "export" else []
    )
    status, out, err = _cli(argv)
    assert status == 0, err
    assert "not following 4 links out of the logdir" in err.replace("\n", "")
    assert "secret" not in out and "1-node-b" not in out
    if command[0] == "export":
        assert len(list((tmp_path / "out").rglob("*.json"))) == len(EXPECTED)
