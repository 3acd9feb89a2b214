"""Progress of a long GPU stage as log lines: done/total, elapsed and an ETA, at most one line
every `every_s` seconds (and the last one always), so a rule's log shows that it is alive and how
long it will take without a bar's carriage returns in the file."""

from __future__ import annotations

import logging
import threading
import time


class Progress:
    def __init__(self, log: logging.Logger, what: str, total: int, unit: str, *, every_s: float = 10.0):
        self.log, self.what, self.total, self.unit, self.every_s = log, what, total, unit, every_s
        self.done = 0
        self._start = self._last = time.perf_counter()
        self._lock = threading.Lock()  # steps may come from worker threads (cold compiles)

    def step(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            now = time.perf_counter()
            if now - self._last < self.every_s and self.done < self.total:
                return
            self._last = now
            line = self.line(now)
        self.log.info("%s", line)

    def line(self, now: float | None = None) -> str:
        elapsed = (time.perf_counter() if now is None else now) - self._start
        pct = 100.0 * self.done / self.total if self.total else 100.0
        left = self.total - self.done
        eta = f", ETA {elapsed / self.done * left:.0f} s" if self.done and left > 0 else ""
        return f"{self.what}: {self.done}/{self.total} {self.unit} ({pct:.0f}%), {elapsed:.0f} s{eta}"
