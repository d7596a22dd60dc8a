"""Trainer steps for ``deepcontext run``: the script's first ``Trainer`` gets the callback.

Written once for Lightning and Hugging Face (``dc_lightning.launch``,
``dc_hf.launch`` say only where each keeps its callbacks). The steps are
claimed when that Trainer is built, before the first optimizer update at
which the plain PyTorch driver would claim them. A Trainer holding the
script's own ``DeepContextCallback`` claims them too, so that nothing
profiles on top of it, and gets nothing added. Later Trainers (a test Trainer
after ``fit``) are left as the script built them: the run's windows are one
trainer's steps, and a second trainer would write the same windows again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("deepcontext")


@dataclass(frozen=True)
class TrainerKind:
    """How to reach one framework's trainer callbacks.

    Args:
        name: The framework, in messages ("Lightning").
        steps: What its steps are, in the report ("trainer.global_step").
        callback: Imports and returns its ``DeepContextCallback`` class (only once
            a Trainer is built: at install the framework is still importing itself).
        callbacks: The callbacks a trainer holds.
        add: Adds a callback to a trainer.
        begin: The callback hook that makes the training session.
    """

    name: str
    steps: str
    callback: Callable[[], type]
    callbacks: Callable[[Any], list]
    add: Callable[[Any, Any], None]
    begin: str

    @property
    def source(self) -> str:
        return f"{self.name} Trainer optimizer steps ({self.steps}), through the DeepContextCallback run added"


def patch(launch: Any, trainer_cls: type, kind: TrainerKind) -> None:
    """Wrap ``trainer_cls.__init__``: the first trainer built gets the callback."""
    original = trainer_cls.__init__
    seen = False

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal seen
        # the script's exceptions pass unchanged; a failed build does not count
        original(self, *args, **kwargs)
        if not seen:
            seen = True
            _attach(launch, self, kind)

    trainer_cls.__init__ = __init__


def _attach(launch: Any, trainer: Any, kind: TrainerKind) -> None:
    """Claim the steps for ``trainer`` and add the callback, unless the script has its own."""
    try:
        base = kind.callback()
        if any(isinstance(c, base) for c in kind.callbacks(trainer)):
            launch.claim(f"the script's own DeepContextCallback on its {kind.name} Trainer")
        elif launch.claim(kind.source):
            kind.add(trainer, _run_callback(launch, base, kind, trainer))
    except Exception as exc:  # fail-open: the trainer runs as the script built it
        logger.warning(
            "DeepContext could not add its callback to the %s Trainer (%r); it runs unprofiled",
            kind.name,
            exc,
        )


def _run_callback(launch: Any, base: type, kind: TrainerKind, trainer: Any) -> Any:
    """The callback whose training sessions are the run's (``launch.adopt``)."""

    def begin(self: Any, *args: Any, **kwargs: Any) -> None:
        # The script may have added its own callback since the trainer was built
        # (configure_callbacks, trainer.add_callback) or opened its own session: it keeps it.
        if self.session is None and (
            launch.user_profiling()
            or any(isinstance(c, base) and c is not self for c in kind.callbacks(trainer))
        ):
            return
        getattr(base, kind.begin)(self, *args, **kwargs)
        if self.session is not None and not launch.owns(self.session):
            launch.adopt(self.session, self.profiling.close)

    def reduce(self: Any) -> Any:
        # Pickled with the trainer (ddp_spawn): elsewhere it is the plain callback,
        # the launch stays in this process.
        return base.__new__, (base,), self.__dict__

    cls = type("RunCallback", (base,), {kind.begin: begin, "__reduce__": reduce})
    return cls(**launch.overrides)
