"""What a session knows of itself: whether it profiles (`State`), the window
open now (`OpenWindow`), and the steps it has seen (`StepsSeen`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class State(enum.Enum):
    """Whether a session profiles. Only ``ON`` opens windows; the others are
    for good (a window open when it turned off is still closed and written)."""

    ON = "on"  # windows open and close as configured
    OFF = "off"  # turned off by no error of its own: enabled=False, a forked child, an unwritable logdir
    FAILED = "failed"  # turned off by an internal error of its own (logged once)


@dataclass
class OpenWindow:
    """The window open now: made when it opens, gone once it is written."""

    planned: tuple[int, int]  # (start, end_exclusive) as scheduled; a loop may end it early
    opened_ns: int  # the session's clock when it opened
    opened_unix_ns: int  # the wall clock then


@dataclass
class StepsSeen:
    """Every step a session was told of, window or not (one compare and three
    stores per step): what its profiles and its closing message say of them."""

    created_ns: int  # the session's clock when it was made
    count: int = 0
    first: int = -1
    last: int = -1
    first_checked_ns: int | None = None  # the first step that could open a window began

    def init_ns(self) -> int:
        """From the session's making to the first step that could open a window; -1 before it."""
        return (self.first_checked_ns - self.created_ns) if self.first_checked_ns else -1

    def said(self) -> str:
        """The steps seen, in words, as the window's steps are counted: by
        their numbers, never a count beside a number."""
        if self.count == 0:
            return (
                "no training step was seen (call step() once per step, or use the trainer callback)"
            )
        if self.first == self.last:
            return f"step {self.last} was seen"
        return f"steps {self.first}–{self.last} were seen"
