"""Answers of the heavy routes, kept and shared under load.

A heavy answer (a flame graph, a table over the whole tree, a diff) is kept
as the bytes sent, gzip-compressed JSON, keyed by the route, the versions
(path, mtime, size) of the files it reads and its parameters: a rewritten
file changes the key, so it is never answered from before. Kept answers are
bounded in number and bytes, least recently used out first.

Under load three things hold. Identical requests arriving together wait for
one computation (single flight) instead of each doing it. At most ``slots``
computations run at once (Python holds one core per process however many
threads ask); a request that finds no free slot within ``wait_s`` is
answered 503 with ``Retry-After`` (`Busy`), so a saturated plugin sheds
requests instead of queueing them without bound, and its memory holds at
``slots`` answers being built.
"""

from __future__ import annotations

import gzip
import io
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from tensorboard.backend import json_util

#: Bytes an entry costs beside its payload (the key, the dict slot), roughly.
ENTRY_OVERHEAD = 512


class Busy(Exception):
    """No slot for a heavy computation came free in time; HTTP 503.

    Attributes:
        retry_after_s: What the ``Retry-After`` header says.
    """

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"the DeepContext plugin is busy; retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


class _Flight:
    """One computation in progress and the requests waiting for it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: bytes | None = None
        self.error: BaseException | None = None
        self.waiting = 0


class Answers:
    """Encoded answers by key: cached, computed once at a time per key, at
    most ``slots`` keys at a time. Safe to share between threads.

    Args:
        max_entries: Answers kept.
        max_bytes: Bytes of kept answers at most (an answer larger than a
            quarter of it is sent and not kept).
        slots: Computations in progress at once.
        wait_s: How long a request waits for a slot before `Busy`.
        follow_s: How long a request waits for an identical one's
            computation before `Busy`.
        retry_after_s: The ``Retry-After`` a `Busy` answer carries.
    """

    def __init__(
        self,
        max_entries: int = 256,
        max_bytes: int = 32 << 20,
        slots: int = 2,
        wait_s: float = 5.0,
        follow_s: float = 60.0,
        retry_after_s: int = 2,
    ) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.wait_s, self.follow_s, self.retry_after_s = wait_s, follow_s, retry_after_s
        self._slots = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, bytes] = OrderedDict()
        self._bytes = 0
        self._flights: dict[Hashable, _Flight] = {}
        self.computed = 0  # computations started, for the tests and the benchmark

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """What the kept answers cost, by `ENTRY_OVERHEAD` and payload."""
        return self._bytes

    def waiting(self) -> int:
        """Requests now waiting for an identical request's computation."""
        with self._lock:
            return sum(f.waiting for f in self._flights.values())

    def get(self, key: Hashable, compute: Callable[[], object]) -> bytes:
        """The encoded answer for ``key``: kept, or being computed by another
        request (waited for), or ``compute()`` (JSON-ready data) encoded now.

        Raises:
            Busy: No slot within ``wait_s``, or the computation waited for
                took longer than ``follow_s``.
            Exception: What ``compute`` raised, to every request that waited
                for it (errors are not kept: a missing file may appear).
        """
        with self._lock:
            kept = self._entries.get(key)
            if kept is not None:
                self._entries.move_to_end(key)
                return kept
            flight = self._flights.get(key)
            leader = flight is None
            if leader:
                flight = self._flights[key] = _Flight()
            else:
                flight.waiting += 1
        if not leader:
            return self._follow(flight)
        try:
            if not self._slots.acquire(timeout=self.wait_s):
                raise Busy(self.retry_after_s)
            try:
                with self._lock:
                    self.computed += 1
                value = encode(compute())
            finally:
                self._slots.release()
            self._keep(key, value)
            flight.value = value
            return value
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()

    def _follow(self, flight: _Flight) -> bytes:
        try:
            if not flight.done.wait(self.follow_s):
                raise Busy(self.retry_after_s)
        finally:
            with self._lock:
                flight.waiting -= 1
        if flight.error is not None:
            raise flight.error
        assert flight.value is not None
        return flight.value

    def _keep(self, key: Hashable, value: bytes) -> None:
        size = len(value) + ENTRY_OVERHEAD
        if size > self.max_bytes // 4:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old) + ENTRY_OVERHEAD
            self._entries[key] = value
            self._bytes += size
            while self._entries and (
                len(self._entries) > self.max_entries or self._bytes > self.max_bytes
            ):
                _, out = self._entries.popitem(last=False)
                self._bytes -= len(out) + ENTRY_OVERHEAD


def encode(body: object) -> bytes:
    """``body`` as TensorBoard's ``http_util.Respond`` sends JSON (ASCII,
    infinities and NaN as strings), gzip-compressed as it does (level 3, no
    mtime): the bytes do not depend on whether they were kept."""
    try:
        text = json.dumps(body, allow_nan=False)  # plain data: the C encoder, no walk in Python
    except (TypeError, ValueError):
        text = json.dumps(json_util.Cleanse(body, "utf-8"))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=3, mtime=0) as f:
        f.write(text.encode("utf-8"))
    return out.getvalue()
