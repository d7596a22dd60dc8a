"""Where profiles live, and reading them back.

Layout (TensorBoard's plugin-asset convention)::

    <logdir>/<run>/plugins/deepcontext/<rank>-<host>/steps-<first>-<last>.pb

Writes are atomic (temporary file, fsync, rename): a reader never sees half a
file, a temporary left by a killed writer is never read, and the next write in
its directory removes it once it is stale.

Every reader goes through `read_profile`, which refuses a file over the size
cap (``DEEPCONTEXT_MAX_PROFILE_BYTES``, or a reader's own limit) by name
before reading a byte of it.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from .profile import Profile, ProfileError, decode, encode

logger = logging.getLogger("deepcontext")

PLUGIN_NAME = "deepcontext"
MAX_BYTES_ENV = "DEEPCONTEXT_MAX_PROFILE_BYTES"
DEFAULT_MAX_BYTES = 512 << 20
#: A temporary this much older than a fresh write is a killed writer's: a live
#: writer creates, writes and renames its temporary within one `write_atomic`
#: or `write_visible` call (the profile is encoded before the temporary
#: exists), and every write moves the temporary's mtime forward.
STALE_TEMP_S = 3600.0
# ASCII digits only: "²".isdigit() is True, but int("²") raises.
_DIGITS = re.compile(r"^[0-9]+$")
_FILE_RE = re.compile(r"^steps-([0-9]+)-([0-9]+)\.pb$")
_TEMP_PREFIX, _TEMP_SUFFIX = ".tmp-", ".pb.partial"
_TEMP_RE = re.compile(r"^\.tmp-[A-Za-z0-9_]+\.pb\.partial$")  # the names mkstemp gives ours
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def shown_path(path: str | Path) -> str:
    """``path`` as a message shows it: relative to the working directory when
    it is below it, else as it is."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


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
    return rewrite_profile(profile, path)


def rewrite_profile(profile: Profile, path: str | Path) -> Path:
    """Encode ``profile`` and atomically replace the file at ``path`` with it
    (``analyze`` stores findings back where it found a profile this way)."""
    return write_atomic(encode(profile), Path(path))


def write_atomic(data: bytes, path: Path) -> Path:
    """Atomically replace the file at ``path`` (its directory exists) with
    ``data``: a temporary beside it, fsync, rename. Returns ``path``."""
    remove_stale_temps(path.parent, _replace(data, path, sync=True))
    return path


def write_visible(data: bytes, path: Path) -> float:
    """`write_atomic` without waiting for the disk: once this returns, every
    process sees ``data`` at ``path`` (the OS's page cache keeps it past this
    process's end, an ``os._exit`` included); `sync_file` makes it durable.
    Returns the new file's mtime, the filesystem's clock, for `sync_file`."""
    return _replace(data, path, sync=False)


def sync_file(path: Path, now: float) -> None:
    """Wait until the file `write_visible` wrote at ``path`` is on disk, then
    remove killed writers' temporaries beside it (those older than ``now``
    by `STALE_TEMP_S`)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    remove_stale_temps(path.parent, now)


def _replace(data: bytes, path: Path, sync: bool) -> float:
    mode = _file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)  # mkstemp's 0600 would hide profiles from the TensorBoard serving them
            out.write(data)
            out.flush()
            if sync:
                os.fsync(out.fileno())
            now = os.fstat(out.fileno()).st_mtime  # the filesystem's clock, as the stale files' mtimes
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return now


def _file_mode(path: Path) -> int:
    """The mode the file at ``path`` has (a rewrite keeps it), else what a new
    file gets under the process's umask, as the event files beside it do."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # Linux reports it without changing it; os.umask() can only read by setting,
    # which another thread creating a file at that moment would see.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def remove_stale_temps(directory: Path, now: float, older_than_s: float = STALE_TEMP_S) -> list[Path]:
    """Remove our temporaries in ``directory`` whose mtime is ``older_than_s``
    before ``now``: those of writers killed mid-write. Returns what was removed;
    never raises (another writer may remove the same file first)."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if not _TEMP_RE.match(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and now - info.st_mtime > older_than_s:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


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
    finds runs; sorted by run, rank, first step. Directories that are not
    ``<rank>-<host>`` and names that are not ``steps-<first>-<last>.pb`` are
    passed over; an unreadable directory is logged and passed over."""
    root = Path(logdir)
    found = []
    for plugin_dir in _plugin_dirs(root):
        run_dir = plugin_dir.parent.parent
        run = run_dir.relative_to(root).as_posix() if run_dir != root else "."
        for rank_dir in sorted(p for p in _listing(plugin_dir) if p.is_dir()):
            rank_text, _, host = rank_dir.name.partition("-")
            if not _DIGITS.match(rank_text):
                continue
            for file in _listing(rank_dir):
                match = _FILE_RE.match(file.name)
                if match and file.is_file():
                    first, last = int(match[1]), int(match[2])
                    found.append(ProfileFile(file, run, int(rank_text), host, (first, last + 1)))
    return sorted(found, key=lambda f: (f.run, f.rank, f.steps, f.host))


def _listing(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError as exc:
        logger.warning("DeepContext: cannot list %s: %s", directory, exc.strerror or exc)
        return []


def _plugin_dirs(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, _ in os.walk(root):
        dirnames.sort()
        if Path(dirpath).name == "plugins" and PLUGIN_NAME in dirnames:
            yield Path(dirpath) / PLUGIN_NAME
            dirnames.remove(PLUGIN_NAME)


def max_profile_bytes(env: Mapping[str, str] = os.environ) -> int:
    """The largest profile file readers read: ``DEEPCONTEXT_MAX_PROFILE_BYTES``
    (a positive number of bytes), else 512 MiB.

    Raises:
        ValueError: the variable is set to something else; the message names it.
    """
    raw = env.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    if not _DIGITS.match(raw) or int(raw) == 0:
        raise ValueError(f"{MAX_BYTES_ENV}={raw[:40]!r}: expected a positive whole number of bytes, "
                         f"e.g. {DEFAULT_MAX_BYTES} (512 MiB)")
    return int(raw)


def read_profile(file: ProfileFile | str | Path, max_bytes: int | None = None) -> Profile:
    """Read one file; raises `ProfileError` naming it when it cannot be used.

    Args:
        file: A listed file, or a path.
        max_bytes: Size cap; `max_profile_bytes` when None. A larger file is
            refused without being read.

    Raises:
        ProfileError: unreadable, over the cap, corrupt or from a newer schema.
        ValueError: ``max_bytes`` is None and the environment's cap is invalid.
    """
    path = file.path if isinstance(file, ProfileFile) else Path(file)
    limit = max_profile_bytes() if max_bytes is None else max_bytes
    profile = decode(_read_capped(path, limit), path)
    if isinstance(file, ProfileFile):
        profile.run = file.run
    return profile


def _read_capped(path: Path, limit: int) -> bytes:
    def too_big(size: int) -> ProfileError:
        return ProfileError(path, f"{_mib(size)} is over the {_mib(limit)} size limit for profiles "
                                  f"(raise it with {MAX_BYTES_ENV} or --max-file-mb)")

    try:
        # O_NONBLOCK: a FIFO swapped in for the file must not block the reader.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ProfileError(path, "not a regular file")
            if info.st_size > limit:
                raise too_big(info.st_size)
            data = handle.read(limit + 1)  # the file may have grown since fstat
    except OSError as exc:
        raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise too_big(len(data))
    return data


def _mib(size: int) -> str:
    if size < 2**20:
        return f"{size} bytes"
    return f"{size >> 20} MiB" if size % 2**20 == 0 else f"{size / 2**20:.1f} MiB"


def load_profiles(logdir: str | Path, files: list[ProfileFile] | None = None,
                  max_bytes: int | None = None) -> tuple[list[Profile], list[ProfileError]]:
    """Read every profile under ``logdir``; bad files are reported, the rest kept."""
    limit = max_profile_bytes() if max_bytes is None else max_bytes
    profiles, errors = [], []
    for file in files if files is not None else find_profiles(logdir):
        try:
            profiles.append(read_profile(file, limit))
        except ProfileError as exc:
            errors.append(exc)
    return profiles, errors
