"""#41 (8): ``source.adopt_offsets_from`` adopts another pipeline's offsets only once that pipeline
has stopped committing (no JVM: the tables' watermarks are given)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from icetide.app import adopt
from icetide.errors import ConfigError
from icetide.lake.offsets import Watermark


def _cfg() -> Any:
    return SimpleNamespace(name="new", source=SimpleNamespace(adopt_offsets_from="old", topics=["orders"]),
                           target=SimpleNamespace(route=None), stream=SimpleNamespace(takeover_after="60 seconds"))


def _held(ago_s: float) -> dict[str, dict[str, Watermark]]:
    wm = Watermark(offsets={("orders", 0): 500}, run="r1", batch=9, committed_at_ms=int((time.time() - ago_s) * 1000))
    return {"old": {"ns.orders": wm}}


def _start(monkeypatch: pytest.MonkeyPatch, reads: list[float]) -> list[float]:
    """Run the check with the old pipeline's last commit ``reads[i]`` seconds ago at read i; the waits."""
    answers = iter(reads)
    monkeypatch.setattr(adopt, "foreign_offsets", lambda spark, cfg, writer: _held(next(answers)))
    waits: list[float] = []
    adopt.refuse_foreign_offsets(cast(Any, None), _cfg(), cast(Any, None), sleep=waits.append)
    return waits


def test_a_pipeline_that_stopped_long_ago_is_adopted_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _start(monkeypatch, [3600.0]) == []


def test_a_pipeline_that_just_stopped_is_adopted_after_the_takeover_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    waits = _start(monkeypatch, [20.0, 61.0])  # its last commit 20 s ago; quiet since
    assert len(waits) == 1 and 40 <= waits[0] <= 42


def test_a_pipeline_still_committing_is_refused_naming_it_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the new pipeline adopted the offsets at once, and both wrote the same records."""
    with pytest.raises(ConfigError) as err:
        _start(monkeypatch, [5.0, 2.0])  # it committed again while the start waited
    text = str(err.value)
    assert text.startswith("source.adopt_offsets_from: pipeline 'old' committed to ns.orders")
    assert "still running" in text and "stop 'old'" in text and "stream.takeover_after (60 s)" in text


def test_a_stop_during_the_wait_ends_the_start_and_a_skewed_clock_waits_no_longer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Review: SIGTERM was ignored during the wait; a commit stamped ahead of this clock made the
    wait unbounded; the adopted pipeline gone from the second read raised KeyError."""
    from icetide.errors import StoppedBeforeStart

    monkeypatch.setattr(adopt, "foreign_offsets", lambda spark, cfg, writer: _held(5.0))
    with pytest.raises(StoppedBeforeStart):
        adopt.refuse_foreign_offsets(cast(Any, None), _cfg(), cast(Any, None), sleep=lambda s: True)
    waits = []
    answers = iter([_held(-3600.0), _held(120.0)])  # an hour in the future, then quiet
    monkeypatch.setattr(adopt, "foreign_offsets", lambda spark, cfg, writer: next(answers))
    adopt.refuse_foreign_offsets(cast(Any, None), _cfg(), cast(Any, None), sleep=waits.append)
    assert len(waits) == 1 and waits[0] <= 61
    answers = iter([_held(5.0), {}])  # its offsets gone from the tables at the second read
    monkeypatch.setattr(adopt, "foreign_offsets", lambda spark, cfg, writer: next(answers))
    adopt.refuse_foreign_offsets(cast(Any, None), _cfg(), cast(Any, None), sleep=lambda s: None)
