"""Profile files written off the training thread.

A window's close encodes its profile on the training thread (the collector is
reused at once) and hands the bytes to `ProfileWriter`, whose daemon thread
creates the temporary, writes, fsyncs and renames it (`logdir.write_atomic`).
The filesystem's latency, an fsync that takes tens of milliseconds on a network
filesystem, then never sits in a training step. Writes keep their order; at
most `DEPTH` wait, so a filesystem slower than the windows makes `submit`
wait rather than memory grow. `flush` (interpreter exit) and `close` (a
session's close) return once every submitted profile is on disk or has failed.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import weakref
from pathlib import Path
from typing import Callable

from .logdir import write_atomic

logger = logging.getLogger("deepcontext")

#: Encoded profiles waiting to be written at most; `submit` waits past it.
DEPTH = 4

_LIVE: "weakref.WeakSet[ProfileWriter]" = weakref.WeakSet()  # writers with a thread


def flush_all() -> None:
    """Wait for every writer's submitted profiles (before a process ends itself)."""
    for writer in list(_LIVE):
        writer.flush()


class WriterThread(threading.Thread):
    """The profile writer's thread (named, so that samplers and thread dumps say whose)."""


class ProfileWriter:
    """Writes encoded profiles in order on a daemon thread of its own.

    Args:
        done: Called on the writer's thread with each path once written.
        failed: Called on the writer's thread with a path and the error that
            stopped its write; the file is not there.
    """

    def __init__(self, done: Callable[[Path], None], failed: Callable[[Path, OSError], None]) -> None:
        self._done = done
        self._failed = failed
        self._queue: queue.Queue = queue.Queue(maxsize=DEPTH)
        self._thread: WriterThread | None = None
        self._pid = os.getpid()

    def submit(self, data: bytes, path: Path) -> None:
        """Write ``data`` to ``path`` (its directory exists) on the writer's
        thread, or here when no thread can be started (interpreter shutdown)."""
        if not self._alive():
            try:
                self._start()
            except RuntimeError:  # "can't start new thread", or at shutdown
                self._write(data, path)
                return
        self._queue.put((data, path))

    def flush(self) -> None:
        """Wait until every submitted profile is written or has failed."""
        if self._alive():
            self._queue.join()

    def close(self) -> None:
        """Flush, then end the writer's thread; a later `submit` starts another."""
        if self._alive():
            assert self._thread is not None
            self._queue.put(None)
            self._thread.join()
        self._thread = None
        _LIVE.discard(self)
        atexit.unregister(self.flush)

    def _alive(self) -> bool:
        # A forked child has the object but not the thread (nor a use for it).
        return self._thread is not None and self._thread.is_alive() and os.getpid() == self._pid

    def _start(self) -> None:
        thread = WriterThread(target=self._run, name="deepcontext-writer", daemon=True)
        thread.start()
        self._thread = thread
        _LIVE.add(self)
        atexit.register(self.flush)  # a daemon thread dies mid-write at exit otherwise

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:  # close(): everything before it is written
                    return
                self._write(*item)
            finally:
                self._queue.task_done()

    def _write(self, data: bytes, path: Path) -> None:
        try:
            try:
                write_atomic(data, path)
            except OSError as exc:
                self._failed(path, exc)
            else:
                self._done(path)
        except Exception:  # a callback's error must not end the writer (flush would wait forever)
            logger.debug("DeepContext: the profile writer's callback failed", exc_info=True)
