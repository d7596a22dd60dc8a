"""The Hugging Face callback: ``Trainer`` events → `TrainerSession` calls.

Phases need no event here: the PyTorch adapter marks backward at
``Tensor.backward`` and the optimizer at ``Optimizer.step``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from dc_core.record.config import ProfilerConfig
from dc_core.record.eval_windows import batch_count
from dc_core.record.trainer import ProfilingCallback, TrainerSession
from dc_torch.adapter import TorchAdapter


class DeepContextCallback(ProfilingCallback, TrainerCallback):
    """Profiles ``Trainer.train`` in step windows; one line in the trainer.

    Steps are optimizer steps (``state.global_step``): ``on_step_begin`` comes
    at the first micro-batch of a step and ``on_step_end`` after the optimizer,
    so with gradient accumulation (``on_substep_end`` between micro-batches)
    a step spans all its micro-batches. Profiles go beside TensorBoard's
    scalars (``args.logging_dir`` where the arguments have one, else
    ``TENSORBOARD_LOGGING_DIR``, else the run ``report_to="tensorboard"`` just
    opened under ``<output_dir>/runs``, else ``<output_dir>/runs``) unless ``logdir``
    is given; each process writes its own files (rank ``args.process_index``).

    Args:
        config: What to profile; keyword ``overrides`` replace its fields
            (``DEEPCONTEXT_CONFIG`` wins over both). With ``profile_eval=True``
            evaluation batches are profiled as their own windows (run
            ``<run>/eval``; steps count batches, from the first).
    """

    def __init__(self, config: ProfilerConfig | None = None, **overrides: Any) -> None:
        self.profiling = TrainerSession(
            config, overrides, adapter=TorchAdapter, machinery=("transformers",)
        )
        self._eval_batches = 0  # batches of the evaluation running

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiling.begin(
            rank=args.process_index, world_size=args.world_size, place=lambda: _scalars_dir(args)
        )

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiling.step_begin(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiling.step_end()
        self._maybe_eval_follows(control)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._maybe_eval_follows(control)

    def _maybe_eval_follows(self, control: Any) -> None:
        """Evaluation has no begin event: its first batch begins where the flow
        callback (run before ours) has just set ``control.should_evaluate``."""
        if control.should_evaluate:
            self.profiling.eval_begin("eval")

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Ends one eval batch and, unless it was the loader's last, begins the next."""
        if self.profiling.eval_wanted:
            self.profiling.eval_end()
            self._eval_batches += 1
            if self._eval_batches != batch_count(kwargs.get("eval_dataloader")):
                self.profiling.eval_begin("eval")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiling.eval_end()
        self._eval_batches = 0

    on_predict = on_evaluate

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiling.close()


def _scalars_dir(args: Any) -> dict[str, str]:
    """Where TensorBoard's scalars go: the logging dir the arguments or the
    environment name, else the run the TensorBoard callback opened, else ``<output_dir>/runs``."""
    logdir = getattr(args, "logging_dir", None) or os.environ.get("TENSORBOARD_LOGGING_DIR")
    return {
        "logdir": logdir or _scalar_run(args.output_dir) or os.path.join(args.output_dir, "runs")
    }


def _scalar_run(output_dir: str) -> str | None:
    """The run directory TensorBoard's callback opened at train begin (it runs
    before user callbacks): the newest ``<output_dir>/runs/*`` with an event file."""
    runs = Path(output_dir) / "runs"
    found = [d for d in runs.glob("*") if d.is_dir() and any(d.glob("events.out.tfevents.*"))]
    return str(max(found, key=lambda d: d.stat().st_mtime)) if found else None
