"""Where profiles live, and reading them back.

Layout (TensorBoard's plugin-asset convention)::

    <logdir>/<run>/plugins/deepcontext/<rank>-<host>/steps-<first>-<last>.pb

Writes are atomic (temporary file, fsync, rename): a reader never sees half a
file, a temporary left by a killed writer is never read, and the next write in
its directory removes it once it is stale.

Every reader goes through `read_profile`, which refuses a file over the size
cap (``DEEPCONTEXT_MAX_PROFILE_BYTES``, or a reader's own limit) by name
before reading a byte of it.

A logdir is anyone's directory tree (a shared filesystem, an unpacked
archive), so readers follow no link out of it: `find_profiles` passes over a
profile file, rank directory or ``plugins/deepcontext`` that is a symlink whose
target resolves outside the logdir, and names it; a link that stays inside
works as its target would. `read_profile` checks again what it opened.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

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


def profile_path(
    logdir: str | Path, run: str | None, rank: int, host: str, steps: tuple[int, int]
) -> Path:
    """File of the window ``steps`` = (start, end_exclusive); the name holds the last step."""
    return (
        profile_dir(logdir, run, rank, host) / f"steps-{steps[0]}-{max(steps[1] - 1, steps[0])}.pb"
    )


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
            # mkstemp's 0600 would hide profiles from the TensorBoard serving them
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            if sync:
                os.fsync(out.fileno())
            now = os.fstat(
                out.fileno()
            ).st_mtime  # the filesystem's clock, as the stale files' mtimes
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


def remove_stale_temps(
    directory: Path, now: float, older_than_s: float = STALE_TEMP_S
) -> list[Path]:
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
    #: The logdir's real path: `read_profile` refuses the file when what it
    #: opens lies outside it (a link swapped in after the listing).
    within: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class OutwardLink:
    """A symlink under a logdir whose target lies outside it: never followed."""

    path: Path
    target: str


def find_profiles(
    logdir: str | Path, outward: list[OutwardLink] | None = None
) -> list[ProfileFile]:
    """Every profile under ``logdir``, searched recursively like TensorBoard
    finds runs; sorted by run, rank, first step. Directories that are not
    ``<rank>-<host>`` and names that are not ``steps-<first>-<last>.pb`` are
    passed over; an unreadable directory is logged and passed over.

    A ``plugins/deepcontext``, rank directory or profile file that is a
    symlink to outside the logdir (``logdir`` itself resolved first) is
    passed over too: appended to ``outward`` when given, else logged in one
    warning (`outward_message`).
    """
    root = Path(logdir)
    real_root = os.path.realpath(root)
    found: list[OutwardLink] = []

    def inside(path: str, link: bool) -> bool:
        if not link:  # an entry of a directory already inside
            return True
        target = os.path.realpath(path)
        if not _within(target, real_root):
            found.append(OutwardLink(Path(path), target))
            return False
        return True

    profiles = []
    for plugin_dir in _plugin_dirs(root):
        if not inside(str(plugin_dir), os.path.islink(plugin_dir)):
            continue
        run_dir = plugin_dir.parent.parent
        run = run_dir.relative_to(root).as_posix() if run_dir != root else "."
        for rank_dir in sorted(_listing(plugin_dir), key=lambda e: e.name):
            rank_text, _, host = rank_dir.name.partition("-")
            if not (
                _DIGITS.match(rank_text)
                and _followed(rank_dir.is_dir)
                and inside(rank_dir.path, rank_dir.is_symlink())
            ):
                continue
            for file in _listing(Path(rank_dir.path)):
                match = _FILE_RE.match(file.name)
                if match and _followed(file.is_file) and inside(file.path, file.is_symlink()):
                    first, last = int(match[1]), int(match[2])
                    profiles.append(
                        ProfileFile(
                            Path(file.path), run, int(rank_text), host, (first, last + 1), real_root
                        )
                    )
    if outward is not None:
        outward.extend(found)
    elif found:
        logger.warning("DeepContext: %s", outward_message(found, root))
    return sorted(profiles, key=lambda f: (f.run, f.rank, f.steps, f.host))


def outward_message(links: list[OutwardLink], logdir: str | Path, shown_links: int = 5) -> str:
    """One line naming the links `find_profiles` did not follow: their count,
    then the first ``shown_links`` as ``'relative/path' -> '/target'`` (repr:
    a name may hold control characters)."""

    def named(link: OutwardLink) -> str:
        try:
            relative = link.path.relative_to(logdir).as_posix()
        except ValueError:
            relative = str(link.path)
        return f"{relative!r} -> {link.target!r}"

    listed = ", ".join(named(link) for link in links[:shown_links])
    more = f" and {len(links) - shown_links} more" if len(links) > shown_links else ""
    return (
        f"not following {len(links)} link{'s' if len(links) != 1 else ''} out of the logdir "
        f"{str(logdir)!r}: {listed}{more}"
    )


def _within(real: str, real_root: str) -> bool:
    """Whether the resolved path ``real`` is ``real_root`` or below it (by
    components: ``/srv/app-secrets`` is not below ``/srv/app``)."""
    try:
        return os.path.commonpath([real, real_root]) == real_root
    except ValueError:  # one relative, or different drives
        return False


def _followed(test: Callable[[], bool]) -> bool:
    """``entry.is_dir`` or ``entry.is_file`` (following a link); False when
    that fails (a link looping on itself)."""
    try:
        return test()
    except OSError:
        return False


def _listing(directory: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError as exc:
        logger.warning("DeepContext: cannot list %s: %s", directory, exc.strerror or exc)
        return []


def _plugin_dirs(root: Path) -> Iterator[Path]:
    # os.walk does not descend into a linked directory: a linked run is passed over as before.
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
        raise ValueError(
            f"{MAX_BYTES_ENV}={raw[:40]!r}: expected a positive whole number of bytes, "
            f"e.g. {DEFAULT_MAX_BYTES} (512 MiB)"
        )
    return int(raw)


def read_profile(file: ProfileFile | str | Path, max_bytes: int | None = None) -> Profile:
    """Read one file; raises `ProfileError` naming it when it cannot be used.

    Args:
        file: A listed file (refused when what it opens resolves outside
            the logdir it was listed under), or a path.
        max_bytes: Size cap; `max_profile_bytes` when None. A larger file is
            refused without being read.

    Raises:
        ProfileError: unreadable, over the cap, corrupt or from a newer schema.
        ValueError: ``max_bytes`` is None and the environment's cap is invalid.
    """
    path = file.path if isinstance(file, ProfileFile) else Path(file)
    limit = max_profile_bytes() if max_bytes is None else max_bytes
    within = file.within if isinstance(file, ProfileFile) else None
    profile = decode(_read_capped(path, limit, within), path)
    if isinstance(file, ProfileFile):
        profile.run = file.run
    return profile


def _read_capped(path: Path, limit: int, within: str | None = None) -> bytes:
    def too_big(size: int) -> ProfileError:
        return ProfileError(
            path,
            f"{_mib(size)} is over the {_mib(limit)} size limit for profiles "
            f"(raise it with {MAX_BYTES_ENV} or --max-file-mb)",
        )

    outside = ProfileError(path, "resolves outside the logdir; not read")
    # O_NONBLOCK: a FIFO swapped in for the file must not block the reader.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    opened = str(path)
    if within is not None:
        # Open the resolved path, refusing a link swapped in at its last name
        # since; then check what the descriptor is (a directory swapped above).
        opened = os.path.realpath(path)
        if not _within(opened, within):
            raise outside
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(opened, flags)
        with os.fdopen(fd, "rb") as handle:
            if within is not None and not _within(_opened_path(handle.fileno(), opened), within):
                raise outside
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


def _opened_path(fd: int, fallback: str) -> str:
    """The real path of the open file ``fd`` (Linux names it in /proc), else ``fallback``."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return fallback


def _mib(size: int) -> str:
    if size < 2**20:
        return f"{size} bytes"
    return f"{size >> 20} MiB" if size % 2**20 == 0 else f"{size / 2**20:.1f} MiB"


def load_profiles(
    logdir: str | Path, files: list[ProfileFile] | None = None, max_bytes: int | None = None
) -> tuple[list[Profile], list[ProfileError]]:
    """Read every profile under ``logdir``; bad files are reported, the rest kept."""
    limit = max_profile_bytes() if max_bytes is None else max_bytes
    profiles, errors = [], []
    for file in files if files is not None else find_profiles(logdir):
        try:
            profiles.append(read_profile(file, limit))
        except ProfileError as exc:
            errors.append(exc)
    return profiles, errors
