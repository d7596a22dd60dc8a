"""System-monitor rules: low_gpu_utilization, cpu_bottleneck, io_bottleneck, batch_size, memory_growth."""

from dc_core.analyzer import analyze
from dc_core.store.profile import DeviceMemory
from tests.analyzer.helpers import MS, line, only, profile, rules, series

MIB = 2**20
TREE = ("forward", (line("train", "train.py:20"), f"aten::mm @cpu_time_ns={90 * MS}"))
LOADER = ("dataloader", (line("__getitem__", "data.py:18"), f"aten::randn @cpu_time_ns={30 * MS}"))


def _cpu(*per_core):
    return [series("cpu_percent", values, device=i) for i, values in enumerate(per_core)]


def test_low_gpu_utilization_reports_percentiles():
    p = profile(TREE, system=[series("gpu_util_percent", [10, 20, 30, 40, 50, 20, 20], device=1)])
    f = only(analyze(p), "low_gpu_utilization")
    assert (
        f["evidence"]["device"] == 1
        and f["evidence"]["p50"] == 20.0
        and f["evidence"]["p95"] == 47.0
    )


def test_low_gpu_utilization_quiet_when_busy_or_few_samples():
    busy = profile(TREE, system=[series("gpu_util_percent", [90, 95, 99, 98, 97, 96])])
    few = profile(TREE, system=[series("gpu_util_percent", [5, 5, 5])])
    assert "low_gpu_utilization" not in rules(analyze(busy)) + rules(analyze(few))


def test_cpu_bottleneck_on_a_gpu_job_with_saturated_cpus():
    p = profile(
        TREE, system=[*_cpu([99] * 6, [97] * 6), series("gpu_util_percent", [20] * 6, device=0)]
    )
    f = only(analyze(p), "cpu_bottleneck")
    assert f["evidence"]["cpu"]["p95"] == 98.0 and f["evidence"]["gpu_p50"] == 20.0
    assert f["path"][-1] == "train.py:20 train"


def test_cpu_bottleneck_quiet_on_a_cpu_job_with_busy_cpus():
    p = profile(TREE, system=_cpu([99] * 6, [97] * 6))
    assert "cpu_bottleneck" not in rules(analyze(p))


def test_io_bottleneck_when_the_loader_waits_with_idle_cpus():
    disk = series("disk_read_bytes", [0, 50 * MIB, 100 * MIB, 150 * MIB, 200 * MIB, 250 * MIB])
    p = profile(TREE, LOADER, system=[*_cpu([10, 12, 8, 9, 11, 10], [5] * 6), disk])
    f = only(analyze(p), "io_bottleneck")
    assert (
        f["evidence"]["dataloader_share"] == 0.25 and f["evidence"]["busiest_core"]["p50"] == 10.0
    )
    assert f["evidence"]["disk_read_bytes_per_s"]["p50"] == 500 * MIB
    assert f["path"][-1] == "data.py:18 __getitem__"


def test_io_bottleneck_quiet_when_the_loader_computes():
    p = profile(TREE, LOADER, system=_cpu([100] * 6, [3] * 6))  # one core busy decoding
    assert "io_bottleneck" not in rules(analyze(p))


def test_batch_size_when_everything_is_under_used():
    p = profile(
        TREE,
        system=[
            *_cpu([30] * 6, [20] * 6),
            series("mem_used_percent", [40] * 6),
            series("gpu_util_percent", [35] * 6, device=0),
        ],
    )
    f = only(analyze(p), "batch_size")
    assert (
        f["severity"] == "info"
        and f["evidence"]["cpu"]["p95"] == 25.0
        and f["evidence"]["gpu0"]["p50"] == 35.0
    )


def test_batch_size_quiet_when_one_resource_is_busy():
    p = profile(
        TREE,
        system=[
            *_cpu([30] * 6),
            series("mem_used_percent", [40] * 6),
            series("gpu_util_percent", [99] * 6),
        ],
    )
    assert "batch_size" not in rules(analyze(p))


def test_memory_growth_rising_rss_in_a_window():
    rss = [1000 * MIB + i * 40 * MIB for i in range(9)]
    f = only(analyze(profile(TREE, system=[series("rss_bytes", rss)])), "memory_growth")
    assert f["evidence"]["first_bytes"] == 1040 * MIB and f["evidence"]["last_bytes"] == 1280 * MIB
    assert f["evidence"]["growth_bytes"] == 240 * MIB


def test_memory_growth_in_one_jax_window_is_no_warning_since_jax_profiler_holds_the_trace_in_memory():
    rss = [1000 * MIB + i * 40 * MIB for i in range(9)]
    f = only(
        analyze(profile(TREE, system=[series("rss_bytes", rss)], framework="jax")), "memory_growth"
    )
    assert f["severity"] == "info" and "jax.profiler holds the window's trace" in f["message"]


def test_memory_growth_quiet_for_a_plateau_or_one_jump():
    flat = [1000 * MIB + (i % 2) * MIB for i in range(9)]
    jump = [1000 * MIB] * 4 + [1500 * MIB] * 5  # an allocator growing once is not a leak
    for values in (flat, jump):
        assert "memory_growth" not in rules(
            analyze(profile(TREE, system=[series("rss_bytes", values)]))
        )


def _tracked(timeline):
    return [DeviceMemory("cpu", peak_bytes=max(timeline), timeline_bytes=list(timeline))]


def test_rising_rss_while_the_tracked_tensors_stay_flat_is_a_note():
    # a clean loop's heap settling: glibc keeps freed blocks once large frees raise its mmap threshold
    rss = [1000 * MIB + i * 40 * MIB for i in range(9)]
    flat = [300 * MIB, 500 * MIB, 310 * MIB, 500 * MIB, 305 * MIB, 500 * MIB]
    p = profile(TREE, system=[series("rss_bytes", rss)], memory=_tracked(flat))
    f = only(analyze(p), "memory_growth")
    assert f["severity"] == "info"
    assert "the tensors tracked on cpu did not grow with it: 300 MiB live" in f["message"]


def test_rising_rss_with_the_tracked_tensors_rising_is_a_warning():
    rss = [1000 * MIB + i * 40 * MIB for i in range(9)]
    leak = [300 * MIB + i * 40 * MIB for i in range(9)]
    p = profile(TREE, system=[series("rss_bytes", rss)], memory=_tracked(leak))
    f = only(analyze(p), "memory_growth")
    assert f["severity"] == "warning" and "tracked" not in f["message"]
