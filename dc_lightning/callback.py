"""The Lightning callback: trainer hooks → `TrainerSession` calls.

Phases need no hook here: the PyTorch adapter marks backward at
``Tensor.backward`` and the optimizer at ``Optimizer.step`` (running
Lightning's closure — forward and backward — outside the optimizer phase).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from dc_core.record.config import ProfilerConfig
from dc_core.record.trainer import ProfilingCallback, TrainerSession
from dc_torch.adapter import TorchAdapter


def _importable(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_modules = [
    m for m in map(_importable, ("lightning.pytorch", "pytorch_lightning")) if m is not None
]
_BASES = tuple(m.Callback for m in _modules) or (object,)  # one class for both packages


class DeepContextCallback(ProfilingCallback, *_BASES):  # type: ignore[misc]
    """Profiles ``trainer.fit`` in step windows; one line in the trainer.

    Steps are optimizer steps (``trainer.global_step``), so with gradient
    accumulation a step spans all its micro-batches. Profiles go beside the
    logger's scalars (``trainer.log_dir``, e.g. ``lightning_logs/version_0``)
    unless ``logdir`` is given; each rank writes its own files.

    Args:
        config: What to profile; keyword ``overrides`` replace its fields
            (``DEEPCONTEXT_CONFIG`` wins over both). With ``profile_eval=True``
            validation and test batches are profiled as their own windows
            (run ``<run>/validation``, ``<run>/test``; steps count batches).
    """

    def __init__(self, config: ProfilerConfig | None = None, **overrides: Any) -> None:
        super().__init__()
        self.profiling = TrainerSession(
            config, overrides, adapter=self._adapter, machinery=("lightning",)
        )
        self._module: Any = None  # the LightningModule: its submodules are named from it

    def _adapter(self) -> TorchAdapter:
        adapter = TorchAdapter()
        # `net.0` as named_modules() says, not `0` from `self.net` called first
        adapter.naming_root = self._module
        return adapter

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.profiling.session is None:
            self._module = pl_module
            self.profiling.begin(
                rank=trainer.global_rank,
                world_size=trainer.world_size,
                place=lambda: _scalars_run(trainer),
            )

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self.profiling.step_begin(trainer.global_step)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.profiling.step_end(trainer.global_step)  # ends once the optimizer has stepped

    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not trainer.sanity_checking:
            self.profiling.eval_begin("validation")

    def on_validation_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.profiling.eval_end()

    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.profiling.eval_begin("test")

    def on_test_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.profiling.eval_end()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.profiling.close()
        self._module = None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.teardown(trainer, pl_module, "exception")


def _scalars_run(trainer: Any) -> dict[str, str]:
    """The logger's run directory as logdir and run; without a logger, a run under the root dir."""
    if trainer.loggers:  # log_dir broadcasts from rank 0: every rank calls it here
        logdir, run = os.path.split(os.path.normpath(trainer.log_dir))
        return {"logdir": logdir, "run": run}
    return {
        "logdir": os.path.join(trainer.default_root_dir, "lightning_logs"),
        "run": "deepcontext",
    }
