"""Profile files made durable off the training thread.

A window's close encodes its profile on the training thread (the collector is
reused at once) and hands the bytes to `ProfileWriter.submit`, which writes a
temporary and renames it to its final name there (`logdir.write_visible`):
into the OS's page cache, about a millisecond for a megabyte. When the step
that closed the window returns, the file is there for every reader, and
stays there if the process ends at once (``os._exit`` skips every exit hook:
multiprocessing workers and trainers' fast exits end that way). What waits
for the disk, the fsync that takes tens of milliseconds on a network
filesystem, runs on the writer's daemon thread (`logdir.sync_file`), which
then reports the file written. Syncs keep their order; at most `DEPTH` wait,
so a disk slower than the windows makes `submit` wait rather than work pile
up. `flush` (interpreter exit) and `close` (a session's close) return once
every submitted profile is on disk or has failed.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

from .logdir import sync_file, write_visible

logger = logging.getLogger("deepcontext")

#: Written profiles waiting for their fsync at most; `submit` waits past it.
DEPTH = 4

_LIVE: weakref.WeakSet[ProfileWriter] = weakref.WeakSet()  # writers with a thread


def flush_all() -> None:
    """Wait for every writer's submitted profiles (before a process ends itself)."""
    for writer in list(_LIVE):
        writer.flush()


class WriterThread(threading.Thread):
    """The profile writer's thread (named, so that samplers and thread dumps say whose)."""


class ProfileWriter:
    """Writes encoded profiles where they are submitted and syncs them, in
    order, on a daemon thread of its own.

    Args:
        done: Called on the writer's thread with each path once on disk.
        failed: Called with a path and the error that stopped its write
            (where it was submitted) or its fsync (on the writer's thread);
            the file is not there.
    """

    def __init__(
        self, done: Callable[[Path], None], failed: Callable[[Path, OSError], None]
    ) -> None:
        self._done = done
        self._failed = failed
        self._queue: queue.Queue = queue.Queue(maxsize=DEPTH)
        self._thread: WriterThread | None = None
        self._pid = os.getpid()

    def submit(self, data: bytes, path: Path) -> None:
        """Write ``data`` to ``path`` (its directory exists): under its final
        name when this returns, on disk once the writer's thread synced it
        (here when no thread can be started: interpreter shutdown)."""
        try:
            now = write_visible(data, path)
        except OSError as exc:
            self._report(self._failed, path, exc)
            return
        if not self._alive():
            try:
                self._start()
            except RuntimeError:  # "can't start new thread", or at shutdown
                self._sync(path, now)
                return
        self._queue.put((path, now))

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
        atexit.register(self.flush)  # a daemon thread dies mid-fsync at exit otherwise

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:  # close(): everything before it is synced
                    return
                self._sync(*item)
            finally:
                self._queue.task_done()

    def _sync(self, path: Path, now: float) -> None:
        try:
            sync_file(path, now)
        except (
            OSError
        ) as exc:  # the disk refused what the page cache held: the file may be cut short
            path.unlink(missing_ok=True)
            self._report(self._failed, path, exc)
        else:
            self._report(self._done, path)

    @staticmethod
    def _report(callback: Callable[..., None], *args: object) -> None:
        try:
            callback(*args)
        except Exception:  # a callback's error must not end the writer (flush would wait forever)
            logger.debug("DeepContext: the profile writer's callback failed", exc_info=True)
