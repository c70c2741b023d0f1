"""``run``'s preflight waits for a service that does not answer only when the pipeline has run
before (chaos seed 1130: a pipeline restarted while the broker was down exited as if its config were
wrong); a new pipeline and any config mistake fail at once (no JVM, no broker: the checks are stubbed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from icetide.app import preflight as pf
from icetide.config import load_config
from icetide.errors import ConfigError, IcetideError, ServiceUnreachableError, StoppedBeforeStart
from tests.fixtures.configs import BASE, write


def _cfg(tmp_path: Path, attempts: int = 10):  # type: ignore[no-untyped-def]
    data = {**BASE, "stream": {"checkpoint_location": str(tmp_path / "ckpt"), "restart_attempts": attempts}}
    return load_config(write(tmp_path, data))


def _failing(monkeypatch: pytest.MonkeyPatch, errors: list[IcetideError]) -> list[int]:
    calls: list[int] = []

    def fake(cfg, purpose="write", collect=False):  # type: ignore[no-untyped-def]
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return pf.Preflight()
    monkeypatch.setattr(pf, "preflight", fake)
    return calls


def test_chaos_1130_a_pipeline_that_has_run_waits_for_kafka_at_its_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    cfg = _cfg(tmp_path)
    (tmp_path / "ckpt").mkdir()
    down = ServiceUnreachableError("source.bootstrap_servers: cannot reach Kafka at 127.0.0.1:9092 (down)")
    calls = _failing(monkeypatch, [down, down, down])
    slept: list[float] = []
    assert isinstance(pf.preflight_run(cfg, sleep=slept.append), pf.Preflight)
    assert slept == [2.0, 4.0, 8.0] and len(calls) == 4
    assert "cannot reach Kafka" in caplog.text and "3 of stream.restart_attempts 10" in caplog.text


def test_a_new_pipeline_or_a_config_mistake_fails_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg(tmp_path)
    _failing(monkeypatch, [ServiceUnreachableError("source.bootstrap_servers: cannot reach Kafka")])
    slept: list[float] = []
    with pytest.raises(ServiceUnreachableError):
        pf.preflight_run(cfg, sleep=slept.append)  # no checkpoint folder: never ran
    (tmp_path / "ckpt").mkdir()
    _failing(monkeypatch, [ConfigError("source.topics: Kafka has no topic 'orders'")])
    with pytest.raises(ConfigError):
        pf.preflight_run(cfg, sleep=slept.append)
    assert slept == []


def test_the_wait_ends_after_the_restart_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg(tmp_path, attempts=2)
    (tmp_path / "ckpt").mkdir()
    down = ServiceUnreachableError("catalog.uri: cannot reach the REST catalog")
    calls = _failing(monkeypatch, [down, down, down, down])
    slept: list[float] = []
    with pytest.raises(ServiceUnreachableError):
        pf.preflight_run(cfg, sleep=slept.append)
    assert slept == [2.0, 4.0] and len(calls) == 3


def test_chaos_1202_a_pipeline_whose_checkpoint_was_deleted_has_still_run(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 1202: the checkpoint folder deleted, then the broker down at the restart: exit 2."""
    monkeypatch.setenv("ICETIDE_HOME", str(tmp_path / "home"))
    cfg = _cfg(tmp_path)
    assert not pf.has_run(cfg)
    pf.note_started(cfg)  # the runner, once a query started
    assert pf.has_run(cfg) and not (tmp_path / "ckpt").exists()
    other = load_config(write(tmp_path, {**BASE, "stream": {"checkpoint_location": str(tmp_path / "other")}}))
    assert not pf.has_run(other)


def test_a_remote_checkpoint_is_taken_to_have_run(tmp_path: Path) -> None:
    data = {**BASE, "stream": {"checkpoint_location": "s3://bucket/ckpt/{pipeline}"}}
    assert pf.has_run(load_config(write(tmp_path, data)))
    assert not pf.has_run(_cfg(tmp_path))


def test_a_stop_signal_ends_the_wait_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM while the start waits (the review): the wait ends within a slice, as a clean stop
    (`icetide run` exits 0, as a running pipeline stopped by a signal does; it exited with the
    service's error, 2 for Kafka, the code of a config mistake), naming the service it waited for."""
    import threading
    import time

    cfg = _cfg(tmp_path)
    (tmp_path / "ckpt").mkdir()
    _failing(monkeypatch, [ServiceUnreachableError("source.bootstrap_servers: cannot reach Kafka")] * 5)
    flag = threading.Event()
    threading.Timer(0.3, flag.set).start()
    began = time.monotonic()
    with pytest.raises(StoppedBeforeStart, match="cannot reach Kafka") as e:
        pf.preflight_run(cfg, stopped=flag.is_set)  # the first wait is 2 s, the next 4 s
    assert time.monotonic() - began < 1.5
    assert not e.value.terminal and isinstance(e.value.__cause__, ServiceUnreachableError)
    (tmp_path / "ckpt").rmdir()  # a new pipeline does not wait: its error is the service's, at once
    with pytest.raises(ServiceUnreachableError):
        pf.preflight_run(cfg, stopped=flag.is_set)


def test_an_error_without_text_is_raised_as_it_is_and_a_stop_names_its_type(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of 5fb2a02: the stop's message was built for every error, and ``"".splitlines()[0]``
    turned an error without text into an IndexError."""
    cfg = _cfg(tmp_path)
    _failing(monkeypatch, [ConfigError("")])
    with pytest.raises(ConfigError):
        pf.preflight_run(cfg, sleep=lambda s: None)
    (tmp_path / "ckpt").mkdir()
    _failing(monkeypatch, [ServiceUnreachableError("")])
    with pytest.raises(StoppedBeforeStart, match=r"\(ServiceUnreachableError\): nothing ran"):
        pf.preflight_run(cfg, sleep=lambda s: None, stopped=lambda: True)


def test_a_stop_asked_during_the_last_check_or_sparks_start_starts_no_query() -> None:
    """The review: a signal during the preflight's last, successful check (or while Spark starts) was
    remembered, and the query started anyway, able to end in a start error (exit 1 or 2)."""
    import threading

    from icetide.app.runner import Runner
    from icetide.loops import RestartBudget

    runner = Runner.__new__(Runner)
    runner._stop = threading.Event()
    runner._stop.set()

    def start() -> None:
        raise AssertionError("a query was started after the stop")
    runner._start = start  # type: ignore[method-assign]
    assert runner._start_or_wait(RestartBudget(3)) is None


def test_the_first_stop_reason_wins() -> None:
    """A run stopped by SIGINT whose watch then saw it idle was summed up as "idle" (the demo then ran
    its report after a Ctrl-C)."""
    import threading

    from icetide.app.runner import Runner

    runner = Runner.__new__(Runner)
    runner._stop, runner._stopped_by = threading.Event(), "completed"
    runner.request_stop("SIGINT")
    runner.request_stop("idle")
    assert runner._stopped_by == "SIGINT" and runner._stop.is_set()
