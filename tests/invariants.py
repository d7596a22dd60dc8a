"""Every microsecond in its place: the accounting every profile the profiler writes must keep.

``violations(profile)`` lists what breaks it (empty when the profile is sound):

* every additive metric's exclusive value is >= 0 at every node, and each
  node's inclusive value is its exclusive value plus its children's inclusive
  values (derived by the tree model; checked here against a walk of our own);
* the window root holds nothing of its own and only phases hang from it, so
  the phases' inclusive values add up to the root's;
* the root's time is the sum of the step times within 2% (plus 0.5 ms, one
  step's edges), where the window timed its steps on the thread that ran
  them (``deepcontext run``'s time-range fallback times a range from a
  thread of its own while the work runs on others), less a ``compile`` phase
  (one-off compiles, which step times leave out by design). The root may
  exceed them by its ``other`` phase too: threads in no scope (gloo's worker
  copying a gathered tensor into place) record there while the step runs.

``tests/conftest.py`` runs it over every profile a session writes during the
suite (in this process or a child process's, under the test's ``tmp_path``).
"""

from __future__ import annotations

from dc_core.model.kinds import PHASES
from dc_core.store.profile import Profile

#: Metrics whose values add up the tree (the others are per-node facts).
ADDITIVE = (
    "cpu_time_ns",
    "device_time_ns",
    "count",
    "samples",
    "flops",
    "alloc_bytes",
    "comm_time_ns",
    "exposed_comm_ns",
    "comm_bytes",
)
#: How far the root's time may stand from the step times: relative, and one step's edges.
STEP_SLACK = 0.02
EDGE_SLACK_NS = 500_000


def violations(profile: Profile) -> list[str]:
    """What of the accounting above ``profile`` breaks, one line each."""
    tree = profile.tree
    found: list[str] = []
    for metric in ADDITIVE:
        if metric not in tree.excl:
            continue
        excl = tree.excl[metric]
        negative = [n for n in range(len(tree)) if excl[n] < 0]
        if negative:
            n = negative[0]
            found.append(
                f"{metric}: {len(negative)} node(s) with negative exclusive value, e.g. "
                f"{_where(tree, n)} = {excl[n]}"
            )
        total = list(excl)
        for node in range(len(tree) - 1, 0, -1):  # parents come before their children
            total[tree.parent[node]] += total[node]
        derived = tree.inclusive(metric)
        if derived != total:
            n = next(i for i in range(len(tree)) if derived[i] != total[i])
            found.append(
                f"{metric}: inclusive at {_where(tree, n)} is {derived[n]}, its subtree sums to {total[n]}"
            )
    if "cpu_time_ns" in tree.excl and len(tree) > 1:
        if tree.excl["cpu_time_ns"][0]:
            found.append(f"the root has {tree.excl['cpu_time_ns'][0]} ns of its own")
        strays = [
            c
            for c in tree.children(0)
            if tree.node_frame(c).kind != "phase" or tree.node_frame(c).name not in PHASES
        ]
        if strays:
            found.append(
                "not a phase under the root: "
                + ", ".join(tree.node_frame(c).label() for c in strays[:3])
            )
        steps = sum(profile.step_times_ns)
        # One-off compiles inside a step (JAX tracing a new shape) are a phase
        # of their own that step times leave out by design.
        compiled = tree.find("compile")
        root = tree.inclusive("cpu_time_ns")[0] - (
            tree.inclusive("cpu_time_ns")[compiled] if compiled else 0
        )
        other = tree.find("other")
        beside = tree.inclusive("cpu_time_ns")[other] if other else 0
        off_thread = profile.step_source.startswith("a time range")
        slack = STEP_SLACK * steps + EDGE_SLACK_NS * len(profile.step_times_ns)
        if (
            profile.step_times_ns
            and not off_thread
            and not -slack <= root - steps <= slack + beside
        ):
            found.append(f"the root's time {root} ns is not the steps' {steps} ns (±2%)")
    return found


def _where(tree, node: int) -> str:
    return " › ".join(tree.node_frame(n).label() for n in tree.path(node)) or "the root"
