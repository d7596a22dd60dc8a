"""Reading a captured XSpace: CPU thunks (exclusive), GPU kernels, host dispatches.

Traces are built as XSpace text protos and read through the same
``jax.profiler.ProfileData`` the adapter uses, so the GPU path is checked on a
machine without a GPU."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from jax.profiler import ProfileData

from dc_jax import trace

_STATS = {"hlo_op": 1, "hlo_module": 2, "run_id": 3, "device_ordinal": 4, "profile_start_time": 5}


def _space(
    planes: list[tuple[str, list[tuple[str, list[tuple[str, int, int, dict]]]]]],
) -> ProfileData:
    """planes of (name, lines of (name, events of (name, start_ns, duration_ns, stats)))."""
    out = []
    for pid, (pname, lines) in enumerate(planes, 1):
        names: dict[str, int] = {}
        text_lines = []
        for lid, (lname, events) in enumerate(lines, 1):
            text_events = []
            for ename, start, duration, stats in events:
                mid = names.setdefault(ename, len(names) + 1)
                stat_text = " ".join(
                    f"stats {{ metadata_id: {_STATS[k]} {'str_value' if isinstance(v, str) else 'int64_value'}: {v!r} }}".replace(
                        "'", '"'
                    )
                    for k, v in stats.items()
                )
                text_events.append(
                    f"events {{ metadata_id: {mid} offset_ps: {start * 1000} duration_ps: {duration * 1000} {stat_text} }}"
                )
            text_lines.append(
                f'lines {{ id: {lid} name: "{lname}" timestamp_ns: 0 {" ".join(text_events)} }}'
            )
        metadata = " ".join(
            f'event_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}'
            for n, i in names.items()
        )
        stat_meta = " ".join(
            f'stat_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}'
            for n, i in _STATS.items()
        )
        out.append(
            f'planes {{ id: {pid} name: "{pname}" {" ".join(text_lines)} {metadata} {stat_meta} }}'
        )
    return ProfileData.from_text_proto("\n".join(out))


def _op(name: str, module: str = "jit_step", run: int = 7) -> dict:
    return {"hlo_op": name, "hlo_module": module, "run_id": run, "device_ordinal": 0}


def test_cpu_thunks_are_exclusive_of_nested_thunks_and_counted_per_execution():
    space = _space(
        [
            (
                "/host:CPU",
                [
                    ("python", [("PjitFunction(step)", 0, 50, {})]),
                    (
                        "tf_XLAPjRtCpuClient/1",
                        [
                            (
                                "while.1",
                                100,
                                1000,
                                _op("while.1"),
                            ),  # its body's thunks run inside it
                            ("dot.2", 200, 300, _op("dot.2")),
                            ("dot.2", 600, 300, _op("dot.2")),
                            ("end: dot.2", 900, 5, {}),  # a marker, not an op
                            ("add.3", 2000, 40, _op("add.3", run=8)),
                        ],
                    ),
                ],
            )
        ]
    )
    events, dispatches = trace.read(space)
    ops = {
        (o.hlo_op, o.device): (o.count, o.time_ns, o.on_device)
        for o in trace.aggregate(events, dispatches)
    }
    assert ops == {
        ("while.1", "cpu:0"): (1, 400, False),
        ("dot.2", "cpu:0"): (2, 600, False),
        ("add.3", "cpu:0"): (1, 40, False),
    }
    assert [(d.start, d.duration, d.module, d.outer) for d in dispatches] == [
        (0, 50, "jit_step", True)
    ]


def test_gpu_kernels_carry_device_time_and_summary_lines_are_not_double_counted():
    space = _space(
        [
            (
                "/device:GPU:1",
                [
                    ("XLA Ops", [("fusion.4", 0, 900, _op("fusion.4"))]),
                    (
                        "Stream #13(Compute)",
                        [
                            ("sm90_xmma_gemm_f32", 10, 500, _op("fusion.4")),
                            ("loop_add_fusion", 600, 200, _op("fusion.4")),
                            ("sm90_xmma_gemm_f32", 1000, 500, _op("dot.1", run=8)),
                        ],
                    ),
                ],
            ),
        ]
    )
    events, dispatches = trace.read(space)
    ops = {
        (o.hlo_op, o.kernel): (o.device, o.count, o.time_ns, o.on_device)
        for o in trace.aggregate(events, dispatches)
    }
    assert ops == {
        ("fusion.4", "sm90_xmma_gemm_f32"): ("gpu:1", 1, 500, True),
        ("fusion.4", "loop_add_fusion"): ("gpu:1", 1, 200, True),
        ("dot.1", "sm90_xmma_gemm_f32"): ("gpu:1", 1, 500, True),
    }


def test_a_run_takes_the_phase_marked_when_the_host_dispatched_it():
    space = _space(
        [
            (
                "/host:CPU",
                [
                    (
                        "python",
                        [
                            ("PjitFunction(<lambda>)", 100, 10, {}),
                            ("PjitFunction(step)", 300, 10, {}),
                        ],
                    ),
                    # Asynchronous dispatch: both runs execute after their marked blocks ended.
                    (
                        "tf_XLAPjRtCpuClient/1",
                        [
                            ("exp.1", 250, 20, _op("exp.1", module="jit__lambda", run=1)),
                            ("dot.2", 400, 20, _op("dot.2", run=2)),
                        ],
                    ),
                ],
            )
        ]
    )
    marked = [(90, 200, "dataloader")]

    def phase_at(t: int) -> str | None:
        return next((name for start, end, name in marked if start <= t <= end), None)

    ops = {o.hlo_op: o.phase for o in trace.aggregate(*trace.read(space), phase_at)}
    assert ops == {"exp.1": "dataloader", "dot.2": None}
