"""The fuzzing harness of `test_fuzz_readers`: hypothesis settings sized by
the environment, the per-case time and memory bounds, the corpus of real
profiles as the project's writer writes them, and the structural and
byte-level mutations drawn on them.

The normal suite runs a deterministic `DEFAULT_CASES` cases. More on demand:
``DEEPCONTEXT_FUZZ_EXAMPLES=20000`` runs that many (split over the tests in
the same proportions), and ``DEEPCONTEXT_FUZZ_SEED=7`` draws other cases.

Besides files, the corpus has logdir layouts (`LAYOUT`, built by
`build_layout`): symlinks at every level of the layout, into and out of the
logdir, dangling and looping, named with control and bidi characters.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st

from dc_core.store import profile_pb2
from dc_core.store.logdir import write_profile
from dc_core.store.profile import Profile, ProfileError, decode, encode
from tests.reliability.test_readers import (
    chain_profile,
    memory_model_profile,
    model_profile,
    snapshot_profile,
)

TIME_LIMIT_S = 5.0
MEMORY_LIMIT = 256 << 20
DEFAULT_CASES = 2000
#: Share of the cases each test runs: cheap ones more.
SHARES = {
    "decode": 0.4,
    "readers": 0.28,
    "plugin": 0.175,
    "cli": 0.075,
    "index": 0.05,
    "layout": 0.02,
}


def _cases(test: str) -> int:
    total = int(os.environ.get("DEEPCONTEXT_FUZZ_EXAMPLES") or DEFAULT_CASES)
    return max(1, round(total * SHARES[test]))


def fuzz(test: str):
    """Hypothesis settings: deterministic by default, no example database in the checkout."""
    chosen = os.environ.get("DEEPCONTEXT_FUZZ_SEED")
    configured = settings(
        max_examples=_cases(test),
        derandomize=chosen is None,
        deadline=None,
        database=None,
        print_blob=False,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    return (lambda f: seed(int(chosen))(configured(f))) if chosen else configured


# --- bounds per case -------------------------------------------------------------


class Overtime(BaseException):
    """Raised by the case timer; a BaseException, so no reader's ``except Exception`` hides it."""


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(re.search(rf"{field}:\s+(\d+)", status.read())[1])


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM, the peak resident size
        return True
    except OSError:
        return False


@contextlib.contextmanager
def bounded(what: str):
    """Fail the case past `TIME_LIMIT_S` (a wall-clock timer) or when its peak
    resident memory grows by `MEMORY_LIMIT`. pytest-timeout's own alarm, if
    armed, is put back with what was left of it."""
    measured = _reset_peak()
    before = _rss_kib("VmRSS") if measured else 0

    def alarm(signum, frame):
        raise Overtime(f"{what}: still running after {TIME_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 0.001))
    if measured:
        grew = (_rss_kib("VmHWM") - before) << 10
        assert grew < MEMORY_LIMIT, f"{what}: peak memory grew by {grew >> 20} MiB"


# --- the corpus: real profiles, as the writer writes them ------------------------


CORPUS = (
    lambda: model_profile(0),
    lambda: model_profile(1, scale=3),
    lambda: model_profile(0, (8, 10), scale=2),
    snapshot_profile,
    memory_model_profile,
)


@functools.cache
def corpus() -> tuple[bytes, ...]:
    """The files the cases start from, as `write_profile` writes them (not a
    fixture: hypothesis prints a failing case's arguments, and these are large)."""
    root = Path(tempfile.mkdtemp(prefix="dc-corpus-"))
    try:
        return tuple(
            write_profile(make(), root, f"c{i}").read_bytes() for i, make in enumerate(CORPUS)
        )
    finally:
        shutil.rmtree(root)


class Long(str):
    """A long string that prints short in a failing case."""

    def __repr__(self) -> str:
        return f"Long({len(self)})"


# --- mutations ---------------------------------------------------------------------

INDEX = st.integers(0, 10**6)  # taken modulo the length it indexes
ODD_TEXT = st.sampled_from(
    [
        "",
        "\x00",
        "a\x00b.py",
        "²",
        "٣",
        "\u202eevil",
        "😀" * 3,
        "[bold red]x[/]",
        "<img src=x onerror=alert(1)>",
        Long("x" * 100_000),
        Long("/" * 5000),
        "../../../etc/passwd",
        "/dev/zero",
        "/proc/self/mem",
        "C:\\x",
        " ",
        "\n\r\t",
        "%s%n",
        "{}",
        "NaN",
        "/w/model.py",
    ]
) | st.text(max_size=30)
INT64 = st.sampled_from([2**63 - 1, -(2**63), -1, 0, 1, 10**18]) | st.integers(-(2**63), 2**63 - 1)
UINT32 = st.sampled_from([0, 1, 3, 7, 8, 2**32 - 1]) | st.integers(0, 2**32 - 1)
INT32 = st.sampled_from([-(2**31), -1, 0, 1, 2**31 - 1]) | st.integers(-(2**31), 2**31 - 1)
FLOAT = st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -0.0]) | st.floats()
EVIDENCE = st.sampled_from(
    [
        "",
        "{",
        "null",
        "[]",
        "1e999",
        '"x"',
        '{"node": "x", "steps": 5}',
        '{"a": ' * 40 + "1" + "}" * 40,
        "[" * 5000 + "]" * 5000,
        '{"run": ".", "rank": 0, "steps": [5, 8]}',
        '{"\\u0000": NaN}',
    ]
) | st.text(max_size=20)
HUGE_LENGTHS = st.sampled_from(
    [
        b"\x5a\xff\xff\xff\xff\x0f",  # field 11 (the tree), 4 GiB long
        b"\x52\xff\xff\xff\x7f",  # a string 256 MiB long
        b"\x7a\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # a finding 2**63 long
        b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # an over-long varint
    ]
)


def _item(repeated, i):
    """Element ``i`` (modulo the length) of a repeated field; None when it is empty."""
    return repeated[i % len(repeated)] if len(repeated) else None


def _parent(msg, node, value):
    parents = msg.tree.parent
    if parents:
        i = node % len(parents)
        parents[i] = {0: i, 1: i + 1, 2: -1, 3: -2}.get(value, value % (len(parents) + 3) - 1)


def _frame_ref(msg, node, value):
    if msg.tree.frame:
        msg.tree.frame[node % len(msg.tree.frame)] = value % (len(msg.tree.frames) + 2)


def _frame(msg, i, field, value):
    if (frame := _item(msg.tree.frames, i)) is not None:
        setattr(frame, field, value)


def _string(msg, i, text):
    if msg.strings:
        msg.strings[i % len(msg.strings)] = text


def _metric(msg, m, node, value, name, grow):
    if (metric := _item(msg.tree.metrics, m)) is None:
        return
    if metric.values:
        metric.values[node % len(metric.values)] = value
    if name is not None:
        metric.name = name[:64]
    if grow is not None:  # one value too many or too few
        metric.values.append(1) if grow or not metric.values else metric.values.pop()


def _series(msg, i, value, drop_time):
    if (series := _item(msg.system, i)) is not None:
        series.values.append(value)
        series.t_ns.append(-1)
        if drop_time:
            series.t_ns.pop()


def _finding(msg, i, evidence, node):
    if (finding := _item(msg.findings, i)) is not None:
        finding.evidence_json, finding.node = evidence, node


#: The integer fields of a device's memory: signed, or unsigned (never negative on the wire).
MEMORY_SIGNED = (
    "peak_bytes",
    "peak_t_ns",
    "peak_step",
    "held_at_peak_bytes",
    "allocator_peak_bytes",
    "max_reserved_bytes",
)


def _memory(msg, i, field, value, text, timeline):
    """A device's memory damaged: a number, its peak node, its name, its
    timeline one point longer on one side, or one more device."""
    if timeline == "device" or not msg.memory:
        msg.memory.add(device=text, peak_node=value % 2**31, peak_bytes=value)
        msg.memory_missing.append(text)
        msg.memory_note = text
        return
    device = msg.memory[i % len(msg.memory)]
    if field == "peak_node":
        device.peak_node = value % 2**32 - 2**31
    elif field in ("live_dropped", "unknown_frees"):
        setattr(device, field, value % 2**64)
    else:
        setattr(device, field, value)
    device.device = text
    if timeline == "times":
        device.timeline_t_ns.append(value)
    elif timeline == "bytes":
        device.timeline_bytes.append(value)
    elif timeline == "both":  # equal lengths: a point far out of range
        device.timeline_t_ns.append(value)
        device.timeline_bytes.append(~value)  # -value - 1: in range for any int64


def _scalars(msg, start, end, step_times, rank, world, start_ns, version):
    msg.step_start, msg.step_end, msg.rank, msg.world_size, msg.version = (
        start,
        end,
        rank,
        world,
        version,
    )
    msg.start_unix_ns = msg.init_ns = start_ns
    del msg.step_times_ns[:]
    msg.step_times_ns.extend(step_times)


def _texts(msg, text):
    msg.host = msg.run = msg.framework = msg.mode = text
    msg.env[text] = text
    msg.drops[text] = -5


def _chain(msg, depth, recursion):
    chain = profile_pb2.Profile()
    chain.ParseFromString(encode(chain_profile(depth, recursion)))
    msg.tree.CopyFrom(chain.tree)
    del msg.strings[:]
    msg.strings.extend(chain.strings)


def _clear(msg, part):
    owner, field = {
        "parents": (msg.tree, "parent"),
        "frames": (msg.tree, "frames"),
        "metrics": (msg.tree, "metrics"),
        "strings": (msg, "strings"),
        "system": (msg, "system"),
        "findings": (msg, "findings"),
    }[part]
    owner.ClearField(field)


def _twin(msg, node):
    """A second node with the same parent and frame as ``node``."""
    t = msg.tree
    if len(t.parent) > 1:
        i = 1 + node % (len(t.parent) - 1)
        t.parent.append(t.parent[i])
        t.frame.append(t.frame[i])
        for m in t.metrics:
            m.values.append(m.values[i] if i < len(m.values) else 0)


STRUCTURAL = {
    "parent": (_parent, st.tuples(INDEX, st.integers(0, 60))),
    "frame_ref": (_frame_ref, st.tuples(INDEX, INDEX)),
    "frame": (
        _frame,
        st.tuples(INDEX, st.sampled_from(["kind", "name", "file", "detail", "line"]), UINT32),
    ),
    "string": (_string, st.tuples(INDEX, ODD_TEXT)),
    "metric": (
        _metric,
        st.tuples(INDEX, INDEX, INT64, st.none() | ODD_TEXT, st.none() | st.booleans()),
    ),
    "series": (_series, st.tuples(INDEX, FLOAT, st.booleans())),
    "finding": (_finding, st.tuples(INDEX, EVIDENCE, INT32)),
    "memory": (
        _memory,
        st.tuples(
            INDEX,
            st.sampled_from([*MEMORY_SIGNED, "peak_node", "live_dropped", "unknown_frees"]),
            INT64,
            ODD_TEXT,
            st.sampled_from(["none", "times", "bytes", "both", "device"]),
        ),
    ),
    "scalars": (
        _scalars,
        st.tuples(
            INT64,
            INT64,
            st.lists(INT64, max_size=5),
            INT32,
            INT32,
            INT64,
            st.sampled_from([1, 1, 0, 2, 2**32 - 1]),
        ),
    ),
    "texts": (_texts, st.tuples(ODD_TEXT)),
    "chain": (_chain, st.tuples(st.sampled_from([3, 1100]), st.booleans())),
    "clear": (
        _clear,
        st.tuples(
            st.sampled_from(["parents", "frames", "strings", "metrics", "system", "findings"])
        ),
    ),
    "twin": (_twin, st.tuples(INDEX)),
}


def _flip(data, pos, bit):
    if not data:
        return data
    i = pos % len(data)
    return data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1 :]


def _truncate(data, pos):
    return data[: pos % (len(data) + 1)]


def _insert(data, pos, chunk):
    i = pos % (len(data) + 1)
    return data[:i] + chunk + data[i:]


def _delete(data, pos, count):
    i = pos % (len(data) + 1)
    return data[:i] + data[i + count :]


BYTEWISE = {
    "flip": (_flip, st.tuples(INDEX, st.integers(0, 7))),
    "truncate": (_truncate, st.tuples(INDEX)),
    "insert": (_insert, st.tuples(INDEX, st.binary(min_size=1, max_size=12) | HUGE_LENGTHS)),
    "delete": (_delete, st.tuples(INDEX, st.integers(1, 16))),
}

MUTATION = st.one_of(
    *[st.tuples(st.just(name), args) for name, (_, args) in {**STRUCTURAL, **BYTEWISE}.items()]
)
MUTATIONS = st.lists(MUTATION, min_size=1, max_size=4)


def mutate(data: bytes, mutations: list) -> bytes:
    """Structural mutations on the message first, then byte-level ones on its bytes."""
    msg = profile_pb2.Profile()
    msg.ParseFromString(data)
    for name, args in mutations:
        if name in STRUCTURAL:
            STRUCTURAL[name][0](msg, *args)
    out = msg.SerializeToString()
    for name, args in mutations:
        if name in BYTEWISE:
            out = BYTEWISE[name][0](out, *args)
    return out


def decoded(data: bytes, name: str) -> Profile | ProfileError:
    """The profile, or the error, which must name the file."""
    try:
        return decode(data, name)
    except ProfileError as exc:
        assert exc.file == name and exc.message and str(exc).startswith(f"{name}: ")
        return exc


CASE = dict(base=st.integers(0, len(CORPUS) - 1), mutations=MUTATIONS)


# --- logdir layouts: links in and out, hostile names ------------------------------

#: Every C0 and C1 control character but NUL (no file name can hold it), DEL,
#: and the bidi embeddings, overrides and isolates.
CONTROLS = tuple(
    chr(c)
    for c in [*range(1, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)
NAME = (
    st.lists(
        st.sampled_from(CONTROLS) | st.sampled_from(list("ab-_.\u00e9")), min_size=1, max_size=5
    )
    .map("".join)
    .filter(lambda name: name not in (".", ".."))
)
#: Where a link is (a profile file, a rank directory, a ``plugins/deepcontext``,
#: a run directory), where it leads, and a name for it.
LINK = st.tuples(
    st.sampled_from(["file", "rank", "plugin", "run"]),
    st.sampled_from(["in", "out", "passwd", "dangling", "loop"]),
    NAME,
)
LAYOUT = st.lists(LINK, min_size=1, max_size=6)
PLUGIN_DIR = Path("plugins") / "deepcontext"


def build_layout(root: Path, outside: Path, links: list[tuple[str, str, str]]) -> set[str]:
    """A logdir at ``root`` with one profile of its own (run ``run``, rank 0,
    steps 5-7) and one more to link to (run ``stash``, rank 3), ``outside``
    holding what links lead out to, and ``links``. Returns the links that
    lead out of the logdir and that readers would follow (all but run
    directories, which no reader follows), relative to ``root``."""
    own = write_profile(model_profile(0), root, "run")
    stash = write_profile(model_profile(3), root, "stash")
    away = write_profile(model_profile(1, scale=7), outside, "secret")
    rank_dir, plugin_dir = own.parent, own.parent.parent
    out = set()
    for i, (where, leads, name) in enumerate(links):
        if where == "file":
            link = rank_dir / f"steps-{100 + i}-{100 + i}.pb"
            targets = {"in": stash, "out": away}
        elif where == "rank":
            link = plugin_dir / f"{10 + i}-{name}"
            targets = {"in": stash.parent, "out": away.parent}
        elif where == "plugin":
            (root / f"r{i}{name}" / "plugins").mkdir(parents=True)
            link = root / f"r{i}{name}" / PLUGIN_DIR
            targets = {"in": stash.parent.parent, "out": away.parent.parent}
        else:
            link = root / f"l{i}{name}"
            targets = {"in": root, "out": outside}
        targets.update(passwd=Path("/etc/passwd"), dangling=root / f"missing{name}", loop=link)
        os.symlink(targets[leads], link)
        # /etc/passwd is no directory: only a file link to it would be read
        if where != "run" and (leads == "out" or leads == "passwd" and where == "file"):
            out.add(link.relative_to(root).as_posix())
    return out
