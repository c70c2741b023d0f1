"""LoopService: interval, wake-ups with debounce, failures counted not raised, overrun warning, stop."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from icetide.loops import LoopService


class Recorder(LoopService):
    name = "recorder"

    def __init__(self, interval: float, min_interval: float = 0.0, fail_on: set[int] | None = None,
                 sleep: float = 0.0, run_first: bool = False) -> None:
        super().__init__(interval, min_interval, run_first)
        self.at: list[float] = []
        self.fail_on = fail_on or set()
        self.sleep = sleep

    def tick(self) -> None:
        self.at.append(time.monotonic())
        time.sleep(self.sleep)
        if len(self.at) in self.fail_on:
            raise RuntimeError(f"tick {len(self.at)} fails")


def test_ticks_every_interval_and_stops() -> None:
    loop = Recorder(0.05).start()
    time.sleep(0.4)
    loop.stop(5)
    n = len(loop.at)
    assert 4 <= n <= 9, loop.at
    time.sleep(0.15)
    assert len(loop.at) == n  # nothing after stop


def test_wake_runs_a_tick_early_but_not_before_min_interval() -> None:
    loop = Recorder(60, min_interval=0.3).start()
    t0 = time.monotonic()
    loop.wake()
    deadline = time.monotonic() + 5
    while not loop.at and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loop.at and loop.at[0] - t0 < 1.0  # woken long before the 60 s interval
    for _ in range(5):  # a burst of wake-ups is one more tick, min_interval after the first
        loop.wake()
        time.sleep(0.02)
    time.sleep(0.6)
    loop.stop(5)
    assert len(loop.at) == 2, loop.at
    assert loop.at[1] - loop.at[0] >= 0.3


def test_a_failing_tick_is_counted_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    loop = Recorder(0.02, fail_on={1, 3})
    with caplog.at_level(logging.ERROR):
        loop.run(duration=0.3)
    assert loop.failures == 2 and loop.ticks == len(loop.at) - 2 and loop.ticks >= 3
    assert "recorder: tick failed; the loop goes on" in caplog.text


def test_overrun_is_warned(caplog: pytest.LogCaptureFixture) -> None:
    loop = Recorder(0.01, sleep=0.05, run_first=True)
    with caplog.at_level(logging.WARNING):
        loop.run(duration=0.08)
    assert "recorder: a tick took" in caplog.text and "longer than its interval" in caplog.text


def test_run_first_ticks_at_once_and_foreground_run_stops_from_another_thread() -> None:
    loop = Recorder(3600, run_first=True)
    threading.Timer(0.2, loop.stop).start()
    t0 = time.monotonic()
    loop.run()
    assert len(loop.at) == 1 and loop.at[0] - t0 < 0.1
    assert time.monotonic() - t0 < 2


def test_maintenance_loop_checks_retention_hourly_not_every_cycle(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from icetide.config import load_config
    from icetide.maintenance import loop as maintenance_loop
    from tests.fixtures.configs import BASE, write

    asked: list[bool] = []
    monkeypatch.setattr(maintenance_loop, "run_cycle",
                        lambda *a, retention, **k: (asked.append(retention), ([], []))[1])
    m = maintenance_loop.MaintenanceLoop(None, load_config(write(tmp_path, BASE)), lambda: None)  # type: ignore[arg-type]
    for _ in range(3):
        m.tick()
    assert asked == [True, False, False]
    m.retention_at -= maintenance_loop.RETENTION_EVERY_S
    m.tick()
    assert asked == [True, False, False, True]


class Revisits(Recorder):
    """Asks for the next tick 0.2 s after its first one, as a plan with a partition about to settle does."""

    def tick(self) -> None:
        super().tick()
        if len(self.at) == 1:
            self.due_in(0.2)


def test_a_tick_can_ask_for_the_next_one_sooner_than_the_interval() -> None:
    loop = Revisits(60, min_interval=0.1, run_first=True).start()
    deadline = time.monotonic() + 5
    while len(loop.at) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    loop.stop(5)
    assert len(loop.at) == 2, loop.at  # once: the second tick asked for nothing, so the 60 s interval holds
    assert 0.15 <= loop.at[1] - loop.at[0] < 1.0, loop.at


def test_due_in_never_runs_ticks_closer_than_min_interval() -> None:
    loop = Revisits(60, min_interval=0.6, run_first=True).start()
    deadline = time.monotonic() + 5
    while len(loop.at) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    loop.stop(5)
    assert len(loop.at) == 2 and loop.at[1] - loop.at[0] >= 0.6, loop.at
