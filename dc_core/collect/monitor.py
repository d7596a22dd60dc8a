"""The reference collector's system monitor (``start_monitor`` in ``_native.pyi``).

One reading when it starts, one per interval on a thread of its own, and one
when it stops, as the native monitor takes them; at most ``max_samples``
rows a window, later readings counted as dropped.
"""

from __future__ import annotations

import threading

from dc_core.collect import sysmon
from dc_core.collect.worker import Worker


class Monitor:
    """System readings (`sysmon.ProcReader`) at a fixed interval, kept as rows."""

    def __init__(self, max_samples: int) -> None:
        self.dropped = 0  # readings past max_samples
        self._max_samples = max_samples
        self._rows: list[dict] = []
        self._lock = threading.Lock()  # the monitor's thread appends, any thread reads
        self._worker: Worker | None = None
        self._reader: sysmon.ProcReader | None = None

    def start(self, interval_ms: int) -> None:
        if not interval_ms > 0:
            raise ValueError(f"interval_ms must be > 0, got {interval_ms}")
        if self._worker is not None and self._worker.running:
            return
        self.stop()
        reader = self._reader = sysmon.ProcReader()
        self._record(reader)
        self._worker = Worker(
            "deepcontext-monitor", interval_ms / 1000.0, lambda: self._record(reader)
        )
        self._worker.start()

    def _record(self, reader: sysmon.ProcReader) -> None:
        row = reader.sample()
        with self._lock:
            if len(self._rows) < self._max_samples:
                self._rows.append(row)
            else:
                self.dropped += 1

    def stop(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        running = worker.running
        worker.stop()
        if running and self._reader is not None:
            self._record(self._reader)

    def samples(self) -> dict[str, list]:
        """The rows as columns (`sysmon.COLUMNS`), a per-core reading as a list."""
        with self._lock:
            rows = list(self._rows)
        return {
            column: [list(r[column]) if isinstance(r[column], list) else r[column] for r in rows]
            for column in sysmon.COLUMNS
        }

    def clear(self) -> None:
        """Forget the rows and the drops (the monitor stopped)."""
        with self._lock:
            self._rows.clear()
            self.dropped = 0
