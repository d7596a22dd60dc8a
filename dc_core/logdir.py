"""Where profiles live, and reading them back.

Layout (TensorBoard's plugin-asset convention)::

    <logdir>/<run>/plugins/deepcontext/<rank>-<host>/steps-<first>-<last>.pb

Writes are atomic (temporary file, fsync, rename): a reader never sees half a
file, and a temporary left by a killed writer is ignored.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .profile import Profile, ProfileError, decode, encode

PLUGIN_NAME = "deepcontext"
_FILE_RE = re.compile(r"^steps-(\d+)-(\d+)\.pb$")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def profile_dir(logdir: str | Path, run: str | None, rank: int, host: str) -> Path:
    base = Path(logdir) / run if run else Path(logdir)
    return base / "plugins" / PLUGIN_NAME / f"{rank}-{_SAFE.sub('_', host) or 'host'}"


def profile_path(logdir: str | Path, run: str | None, rank: int, host: str, steps: tuple[int, int]) -> Path:
    """File of the window ``steps`` = (start, end_exclusive); the name holds the last step."""
    return profile_dir(logdir, run, rank, host) / f"steps-{steps[0]}-{max(steps[1] - 1, steps[0])}.pb"


def write_profile(profile: Profile, logdir: str | Path, run: str | None = None) -> Path:
    """Encode and atomically write ``profile``; returns the final path."""
    path = profile_path(logdir, run, profile.rank, profile.host, profile.steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = encode(profile)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".pb.partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@dataclass(frozen=True)
class ProfileFile:
    """A profile file found under a logdir (not yet read)."""

    path: Path
    run: str
    rank: int
    host: str
    steps: tuple[int, int]  # (start, end_exclusive)


def find_profiles(logdir: str | Path) -> list[ProfileFile]:
    """Every profile under ``logdir``, searched recursively like TensorBoard
    finds runs; sorted by run, rank, first step."""
    root = Path(logdir)
    found = []
    for plugin_dir in _plugin_dirs(root):
        run_dir = plugin_dir.parent.parent
        run = run_dir.relative_to(root).as_posix() if run_dir != root else "."
        for rank_dir in sorted(p for p in plugin_dir.iterdir() if p.is_dir()):
            rank_text, _, host = rank_dir.name.partition("-")
            if not rank_text.isdigit():
                continue
            for file in rank_dir.iterdir():
                match = _FILE_RE.match(file.name)
                if match and file.is_file():
                    first, last = int(match[1]), int(match[2])
                    found.append(ProfileFile(file, run, int(rank_text), host, (first, last + 1)))
    return sorted(found, key=lambda f: (f.run, f.rank, f.steps, f.host))


def _plugin_dirs(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, _ in os.walk(root):
        dirnames.sort()
        if Path(dirpath).name == "plugins" and PLUGIN_NAME in dirnames:
            yield Path(dirpath) / PLUGIN_NAME
            dirnames.remove(PLUGIN_NAME)


def read_profile(file: ProfileFile | str | Path) -> Profile:
    """Read one file; raises `ProfileError` naming it when it cannot be used."""
    path = file.path if isinstance(file, ProfileFile) else Path(file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None
    profile = decode(data, path)
    if isinstance(file, ProfileFile):
        profile.run = file.run
    return profile


def load_profiles(logdir: str | Path, files: list[ProfileFile] | None = None) -> tuple[list[Profile], list[ProfileError]]:
    """Read every profile under ``logdir``; bad files are reported, the rest kept."""
    profiles, errors = [], []
    for file in files if files is not None else find_profiles(logdir):
        try:
            profiles.append(read_profile(file))
        except ProfileError as exc:
            errors.append(exc)
    return profiles, errors
