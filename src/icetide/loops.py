"""One loop abstraction for every background service (maintenance, metrics): interval, wake-ups,
debounce, overrun warning, stop signal.

Invariants: ``tick`` runs at most every ``min_interval`` seconds and at least every ``interval``
(sooner when :meth:`LoopService.wake` is called, or when a tick asked for the next one earlier with
:meth:`LoopService.due_in`); ticks never overlap; an exception in ``tick`` is
logged and counted, never raised into the caller; :meth:`LoopService.stop` returns once the running
tick (if any) has finished, or after its timeout.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from typing import Self

log = logging.getLogger(__name__)


class LoopService:
    """Subclass and implement :meth:`tick`; run it in a thread (:meth:`start`) or in the foreground
    (:meth:`run`)."""

    name = "loop"

    def __init__(self, interval: float, min_interval: float = 0.0, run_first: bool = False) -> None:
        self.interval = interval
        self.min_interval = min_interval
        self.run_first = run_first
        self.ticks = 0
        self.failures = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._due: float | None = None  # monotonic time a tick asked the next one to run by
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        raise NotImplementedError

    def wake(self, *_: object) -> None:
        """Run the next tick now (still at least ``min_interval`` after the last one)."""
        self._wake.set()

    def due_in(self, seconds: float) -> None:
        """From inside :meth:`tick`: run the next tick within ``seconds`` (if sooner than ``interval``;
        still at least ``min_interval`` after this one)."""
        due = time.monotonic() + max(0.0, seconds)
        self._due = due if self._due is None else min(self._due, due)

    def start(self) -> Self:
        self._thread = threading.Thread(target=self.run, name=f"icetide-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 300.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop_on_signals(self) -> Self:
        """SIGTERM / SIGINT stop the loop after the running tick (main thread only)."""
        def handler(*_: object) -> None:
            self._stop.set()
            self._wake.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handler)
        return self

    def run(self, duration: float | None = None) -> None:
        """Loop until stopped (or for ``duration`` seconds)."""
        deadline = None if duration is None else time.monotonic() + duration
        last = float("-inf")
        first = self.run_first
        while not self._stop.is_set():
            if not first:
                wait = self.interval if deadline is None else min(self.interval, deadline - time.monotonic())
                if self._due is not None:
                    wait = min(wait, self._due - time.monotonic())
                self._wake.wait(None if math.isinf(wait) else max(0.0, wait))
            first = False
            if self._stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                break
            debounce = self.min_interval - (time.monotonic() - last)
            if debounce > 0 and self._stop.wait(debounce):
                break
            self._wake.clear()
            self._due = None
            last = time.monotonic()
            try:
                self.tick()
                self.ticks += 1
            except Exception:
                self.failures += 1
                log.exception("%s: tick failed; the loop goes on", self.name)
            took = time.monotonic() - last
            if took > self.interval:
                log.warning("%s: a tick took %.0fs, longer than its interval of %.0fs", self.name, took,
                            self.interval)


class RestartBudget:
    """Restarts after *consecutive* failures: progress (a batch committed) since the previous failure
    resets the count, so a run that recovers from a broker restart every day is never used up.

    ``failed(progress)`` records a failure (``progress``: a counter that grows with each batch
    committed) and says whether one more restart is allowed; :attr:`used` is the current streak."""

    def __init__(self, attempts: int, max_backoff: float = 60.0) -> None:
        self.attempts = attempts
        self.max_backoff = max_backoff
        self.used = 0
        self._progress: int | None = None

    def failed(self, progress: int) -> bool:
        if self._progress is not None and progress > self._progress:
            self.used = 0
        self._progress = progress
        self.used += 1
        return self.used <= self.attempts

    def backoff(self) -> float:
        """Seconds to wait before the next restart: 2, 4, 8, … up to ``max_backoff``."""
        return min(self.max_backoff, 2.0 ** self.used)
