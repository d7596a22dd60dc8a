"""Tree queries and readers of JAX's own trace and HLO text, shared by the JAX tests."""

from __future__ import annotations

import glob
import re

from dc_core.record.config import StepRange
from dc_core.store.logdir import read_profile


def nodes(tree, kind, name=None, backward=None):
    """Nodes of ``kind`` (and ``name``, and backward flag, where given), in node order."""
    return [
        n
        for n in range(len(tree))
        if tree.node_frame(n).kind == kind
        and (name is None or tree.node_frame(n).name == name)
        and (backward is None or tree.node_frame(n).backward == backward)
    ]


def profile_with_trace(tmp_path, step, steps=4, window=StepRange(start=1, count=2)):
    """Run ``step`` ``steps`` times under ``dc_jax.profile``; the window's profile
    and the path of the raw ``jax.profiler`` trace it was made from."""
    import dc_jax

    traces = tmp_path / "traces"
    prof = dc_jax.profile(
        logdir=str(tmp_path / "logs"), steps=window, cpu_sampling_hz=0, system_interval_ms=0
    )
    prof.adapter.keep_traces = str(traces)
    with prof:
        for _ in range(steps):
            step()
            prof.step()
    [written] = prof.written
    [raw] = glob.glob(str(traces / "*.xplane.pb"))
    return read_profile(written), raw


def raw_op_times(path: str) -> dict[int, dict[str, int]]:
    """program id → XLA op name → exclusive ns, from the trace's host thunks,
    read here with ``ProfileData`` (not through ``dc_jax.trace``).

    A thunk's time excludes its direct children on its thread (a ``while``
    holds its body's thunks); a program's dispatch is not an op."""
    from jax.profiler import ProfileData

    out: dict[int, dict[str, int]] = {}
    for plane in ProfileData.from_file(path).planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            thunks = []
            for event in line.events:
                stats = dict(event.stats)
                if "hlo_op" in stats and "program_id" in stats:
                    thunks.append(
                        [
                            int(event.start_ns),
                            int(event.duration_ns),
                            int(stats["program_id"]),
                            str(stats["hlo_op"]),
                            int(event.duration_ns),
                        ]
                    )
            thunks.sort(key=lambda t: (t[0], -t[1]))
            open_ = []
            for thunk in thunks:
                while open_ and open_[-1][0] + open_[-1][1] <= thunk[0]:
                    open_.pop()
                if open_:
                    open_[-1][4] -= thunk[1]  # the direct parent's own time
                open_.append(thunk)
            for _, _, program, op, own in thunks:
                ops = out.setdefault(program, {})
                ops[op] = ops.get(op, 0) + own
    return out


def assert_ops_match_the_trace(tree, raw: str) -> None:
    """Every XLA op's device time in ``tree`` equals its exclusive time in the raw
    trace ``raw`` (per op name, summed over programs on both sides), and the
    phases' op time adds up to the whole: shares of op time add to 100%."""
    time = tree.inclusive("device_time_ns")
    ours: dict[str, int] = {}
    for n in nodes(tree, "operator"):
        detail = tree.node_frame(n).detail
        ours[detail] = ours.get(detail, 0) + time[n]
    theirs: dict[str, int] = {}
    for ops in raw_op_times(raw).values():
        for name, ns in ops.items():
            theirs[name] = theirs.get(name, 0) + ns
    assert ours == theirs
    assert sum(time[n] for n in tree.children(0)) == time[0] == sum(theirs.values())


def live_hlo(module: str) -> list[str]:
    """The HLO text of every compiled program called ``module`` alive in JAX's
    CPU client, as XLA prints it (read here, not through ``dc_jax.hlo``)."""
    import jax

    texts = []
    for executable in jax.devices()[0].client.live_executables():
        for hlo in executable.hlo_modules():
            if hlo.name == module:
                texts.append(hlo.to_string())
    return texts


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s*\(")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*[a-z]\w*\[([\d,]*)\]\S*\s+([\w\-]+)\("
)


def kernel_shaped_convolutions(text: str, kernel_shape: tuple[int, ...]) -> dict[str, bool]:
    """The executed instructions of an HLO text that run a convolution (themselves
    or in their fused computation) whose output has ``kernel_shape``'s dimensions
    in any order, i.e. a weight gradient of a conv with that kernel; each →
    whether XLA kept metadata for it."""
    computation, convolving, fused = "", set(), set()
    executed: list[
        tuple[str, str, tuple[int, ...], str, str]
    ] = []  # (name, computation, dims, opcode, line)
    for line in text.splitlines():
        head = _COMPUTATION.match(line)
        if head is not None:
            computation = head.group(1)
            continue
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        name, dims, opcode = match.groups()
        if opcode == "convolution":
            convolving.add(computation)
        fused.update(re.findall(r"\bcalls=%([\w.\-]+)", line) if opcode == "fusion" else ())
        executed.append(
            (name, computation, tuple(int(d) for d in dims.split(",") if d), opcode, line)
        )
    found = {}
    for name, computation, dims, opcode, line in executed:
        calls = re.findall(r"\bcalls=%([\w.\-]+)", line)
        runs_conv = opcode == "convolution" or (
            opcode == "fusion" and any(c in convolving for c in calls)
        )
        if computation not in fused and runs_conv and sorted(dims) == sorted(kernel_shape):
            found[name] = "metadata={" in line
    return found
