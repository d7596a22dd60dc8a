"""Lightning steps for ``deepcontext run``: the script's first ``Trainer`` gets
the callback (see `dc_core.launch.trainers`)."""

from __future__ import annotations

from typing import Any

from dc_core.launch.trainers import TrainerKind, patch


def _callback() -> type:
    from dc_lightning.callback import DeepContextCallback

    return DeepContextCallback


LIGHTNING = TrainerKind(
    name="Lightning",
    steps="trainer.global_step",
    callback=_callback,
    callbacks=lambda trainer: trainer.callbacks,
    add=lambda trainer, callback: trainer.callbacks.append(
        callback
    ),  # fit puts checkpoints last again
    begin="setup",
)


def install(launch: Any, module: Any) -> None:
    """A Lightning trainer module was imported in a process of ``deepcontext run``."""
    patch(launch, module.Trainer, LIGHTNING)
