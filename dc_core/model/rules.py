"""The analyzer's rules by name: their ids and every rule's default
thresholds, in one place.

Here rather than in the analyzer so that checking a config's ``analyzer``
overrides (`dc_core.record.validate`) reads them without importing the
analyzer (the profile format, every rule). The analyzer registers one
function per id and applies the thresholds (`dc_core.analyzer.thresholds`).

Threshold keys are ``"<rule>.<threshold>"``; ``ProfilerConfig.analyzer`` and
``deepcontext analyze --set`` override them. ``"<rule>.enabled": 0`` turns a
rule off. Shares are fractions of the window (0.05 = 5 %), or of the memory
peak for the memory rules; times and sizes are in the unit their name says
(``_mb`` MiB, ``_gb`` GiB).
"""

from __future__ import annotations

#: Every rule's id, in report order within a severity: the single-window
#: rules, then those over several profiles (`dc_core.analyzer.RULES`,
#: ``RANK_RULES``: a test holds them to this list).
RULE_IDS: tuple[str, ...] = (
    "dataloader_bottleneck",
    "gpu_idle",
    "backward_imbalance",
    "exposed_communication",
    "dtype_conversion",
    "layout_conversion",
    "small_ops",
    "unfused_norm",
    "host_sync",
    "optimizer_unfused",
    "step_outlier",
    "low_gpu_utilization",
    "cpu_bottleneck",
    "io_bottleneck",
    "batch_size",
    "memory_growth",
    "allocator_fragmentation",
    "activation_memory",
    "optimizer_state_memory",
    "initialization_time",
    "hotspot",
    "load_imbalance",
    "share_trend",
)

#: Default thresholds, ``"<rule>.<threshold>"`` -> value.
DEFAULTS: dict[str, float] = {
    # context rules
    "hotspot.top": 3,  # lines and operators reported, each
    "hotspot.min_share": 0.05,
    "backward_imbalance.ratio": 3.0,  # backward time / forward time
    "backward_imbalance.min_share": 0.05,
    # A module's parameter all-gathers the step waits for (exposed) take min_share of the
    # mean step or more; the top modules by that time are reported.
    "exposed_communication.min_share": 0.10,
    "exposed_communication.top": 3,
    "dtype_conversion.min_share": 0.05,
    "layout_conversion.min_share": 0.05,
    "small_ops.max_median_us": 20.0,
    "small_ops.min_per_step": 100,
    "small_ops.min_share": 0.05,  # ignore a scope whose small ops cost little in total
    "unfused_norm.min_share": 0.01,
    "host_sync.warn_per_step": 10,  # more syncs per step than this is a warning without device activity too
    "host_sync.warn_share": 0.05,
    "optimizer_unfused.min_share": 0.10,
    "optimizer_unfused.min_ops_per_step": 20,
    "dataloader_bottleneck.min_share": 0.10,
    "dataloader_bottleneck.critical_share": 0.50,
    "gpu_idle.min_idle": 0.30,
    "gpu_idle.critical_idle": 0.60,
    "gpu_idle.min_host_busy": 0.50,
    # system and step rules
    # A step is slow at median_ratio x the median (with >= min_steps_median steps) or
    # sigmas robust standard deviations (1.4826 x MAD) above it (>= min_steps_sigma steps).
    "step_outlier.median_ratio": 2.0,
    "step_outlier.min_steps_median": 3,
    "step_outlier.sigmas": 3.5,
    "step_outlier.min_steps_sigma": 10,
    "step_outlier.min_excess_ms": 5.0,  # below this, a "slow" step is jitter (or a window's first-call costs)
    # A slow step is an info note unless noise cannot explain it: a warning needs
    # warn_min_steps steps and, warn_excess_ms or more above the median, one step
    # of warn_ratio x the median or two slow steps (the excess repeated). A loaded
    # host makes one step of a few 2x slower, by tens of ms on a 100 ms step.
    "step_outlier.warn_min_steps": 5,
    "step_outlier.warn_ratio": 3.0,
    "step_outlier.warn_excess_ms": 20.0,
    "system.min_samples": 5,
    "low_gpu_utilization.max_p95": 70.0,
    "cpu_bottleneck.min_cpu_p95": 90.0,
    "cpu_bottleneck.max_gpu_p50": 50.0,
    "io_bottleneck.min_wait_share": 0.10,  # dataloader share while the CPUs are idle
    "io_bottleneck.max_cpu_p50": 50.0,
    "batch_size.max_cpu_p95": 70.0,
    "batch_size.max_gpu_p95": 70.0,
    "batch_size.max_mem_p95": 70.0,
    "memory_growth.min_fraction": 0.10,
    "memory_growth.min_mb": 64.0,
    "memory_growth.min_windows": 3,
    # Across windows, a context keeps what it allocates: in every window it ends holding more
    # than min_kept_steps steps' worth of what it allocated (a loop variable carries one step's
    # to the next), its kept bytes per step within min_steady x of each other, and that rate
    # over the windows' span reaches min_mb and min_fraction of the peak.
    "memory_growth.min_kept_steps": 1.5,
    "memory_growth.min_steady": 0.5,
    # Memory findings (windows with memory=True); their gain is bytes at the peak, not time.
    # A module's activations saved for backward are min_share of the peak or more and
    # min_mb MiB or more, and checkpointing would save min_mb MiB or more.
    "activation_memory.min_share": 0.25,
    "activation_memory.min_mb": 64.0,
    # The optimizer's state is min_ratio x the parameters or more (AdamW's is 2x) and min_mb MiB.
    "optimizer_state_memory.min_ratio": 2.0,
    "optimizer_state_memory.min_mb": 64.0,
    # A CUDA allocator's highest reserved total is min_ratio x its highest allocated one or
    # more, and min_gb GiB above it.
    "allocator_fragmentation.min_ratio": 1.5,
    "allocator_fragmentation.min_gb": 1.0,
    # A straggler does ratio x the median rank's work per step (its window over its time in
    # the operators every rank runs equally often: host load stretches both alike), or,
    # doing the same work, its median step takes ratio x the ranks' median step time.
    "load_imbalance.ratio": 1.2,
    # Ranks that communicate (their steps end together): a sharded module computing min_excess
    # of the step more in each step than on the other ranks, else a rank busy (the step less its
    # waits for collectives) busy_ratio x the median. Balanced FSDP2 ranks sharing a loaded
    # 2-core host reached 1.32x; one with 20 ms more work per step in a module, 1.58-2.29x.
    "load_imbalance.busy_ratio": 1.5,
    "load_imbalance.z": 3.5,  # robust z-score (median/MAD) of an outlier rank, from 8 ranks on
    "load_imbalance.min_excess": 0.03,  # ...and exceed the median rank by this fraction of the median step
    "load_imbalance.share_diff": 0.20,  # relative difference of a node's share
    "load_imbalance.min_share": 0.05,  # a node's share to compare; the shared work's share to weigh work by
    # A node's share of the window rising across the windows of a rank (>= min_windows):
    # Mann–Kendall p < alpha, for nodes reaching min_share in some window, reported when the
    # Theil–Sen rise (share gained from the first window to the last) is >= min_rise; with
    # hundreds of windows the test alone flags drifts of a tenth of a percent.
    "share_trend.alpha": 0.01,
    "share_trend.min_windows": 8,
    "share_trend.min_share": 0.02,
    "share_trend.min_rise": 0.01,
    "share_trend.top": 3,  # rising nodes reported per rank
    "initialization_time.min_s": 60.0,
    "initialization_time.critical_s": 600.0,
}
