"""The Lightning callback: trainer hooks → DeepContext session calls.

Phases need no hook here: the PyTorch adapter marks backward at
``Tensor.backward`` and the optimizer at ``Optimizer.step`` (running
Lightning's closure — forward and backward — outside the optimizer phase).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from dc_core.record.config import ProfilerConfig
from dc_core.record.eval_windows import EvalWindows
from dc_core.record.session import Session
from dc_torch.adapter import TorchAdapter

_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities")
_MODELS = ("demos",)  # sub-packages that ship model code (``lightning.pytorch.demos.Transformer``)


def _machinery(directory: str) -> list[str]:
    """Prefixes of a Lightning package's own code (trainer, loops, strategies...):
    its modules and sub-packages but the model ones, one level down where a
    sub-package holds them (``lightning/pytorch/demos``)."""
    prefixes = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir() and entry.name not in (*_MODELS, "__pycache__"):
            if any(os.path.isdir(os.path.join(entry.path, m)) for m in _MODELS):
                prefixes += _machinery(entry.path)
            else:
                prefixes.append(entry.path + os.sep)
        elif entry.name.endswith(".py"):
            prefixes.append(entry.path)
    return prefixes


def _importable(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_modules = [m for m in map(_importable, ("lightning.pytorch", "pytorch_lightning")) if m is not None]
_BASES = tuple(m.Callback for m in _modules) or (object,)  # one class for both packages


class DeepContextCallback(*_BASES):  # type: ignore[misc]
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
        self.config, self.overrides = config, overrides
        self.session: Session | None = None
        self.evals = EvalWindows(self._session)
        self.written: list[Path] = []
        self._step: int | None = None  # the optimizer step begun and not yet ended
        self._place: dict[str, Any] = {}
        self._module: Any = None  # the LightningModule: its submodules are named from it

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.session is not None:
            return
        self._module = pl_module
        given = self.config or ProfilerConfig()
        if "logdir" not in self.overrides and given.logdir == ProfilerConfig.logdir:
            if trainer.loggers:  # log_dir broadcasts from rank 0: every rank calls it here
                logdir, run = os.path.split(os.path.normpath(trainer.log_dir))
            else:
                logdir, run = os.path.join(trainer.default_root_dir, "lightning_logs"), "deepcontext"
            self._place = {"logdir": logdir, "run": self.overrides.get("run", given.run or run)}
        self._place.update(rank=trainer.global_rank, world_size=trainer.world_size)
        self.session = self._session()

    def _session(self, **extra: Any) -> Session:
        adapter = TorchAdapter()
        adapter.naming_root = self._module  # `net.0` as named_modules() says, not `0` from `self.net` called first
        session = Session(self.config, framework="torch", adapter=adapter, default_phase="forward",
                          **{**self.overrides, **self._place, **extra})
        if not session.disabled:
            for package in filter(None, map(_importable, _PACKAGES)):  # the trainer's frames are not user code
                for prefix in _machinery(os.path.dirname(package.__file__)):
                    session.collector.skip_prefix(prefix)
        return session

    # --- training steps --------------------------------------------------------
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._step is None and self.session is not None:
            self._step = trainer.global_step
            self.session.step_begin(self._step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._step is not None and trainer.global_step != self._step:  # the optimizer stepped
            step, self._step = self._step, None
            self.session.step_end(step)

    # --- validation and test: their own windows when profile_eval is set ----------
    def _eval_begin(self, trainer: Any, loop: str) -> None:
        if self.session is not None and self.session.config.profile_eval and not trainer.sanity_checking:
            self.evals.begin(self.session, loop)

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._eval_begin(trainer, "validation")

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self.evals.end()

    def on_test_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._eval_begin(trainer, "test")

    def on_test_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self.evals.end()

    # --- the end: flush whatever window is open ------------------------------------
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.session is not None:
            self.session.close()
            self.written += self.session.written + self.evals.close()
        self.session, self._step, self._module = None, None, None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.teardown(trainer, pl_module, "exception")
