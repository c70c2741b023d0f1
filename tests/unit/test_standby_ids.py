"""A standby run (fenced, ``on_fenced: standby``) whose topic ids are older than the table's (a topic
recreated while it stood by): its poll of the tables finds it out (``confirm_stale``), and it takes
over, restarting its query to learn the ids afresh, instead of ending the run (the third review;
JVM-free: the ledger's reads are stubbed)."""
from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from icetide.app import recreated as app_recreated
from icetide.app.runner import Runner
from icetide.config import load_config
from icetide.ingest import ledger as ledger_mod
from icetide.ingest import recreated
from icetide.lake.offsets import Watermark
from tests.fixtures.configs import BASE, write

X, Y = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"


def test_standby_run_with_older_ids_keeps_standing_by(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICETIDE_HOME", str(tmp_path / "home"))
    cfg = load_config(write(tmp_path, BASE))
    # the table: run A already set the deleted topic aside and wrote the new topic (id Y)
    table_now = Watermark({("orders", 0): 1_500}, "runA", 3, committed_at_ms=1_000, topic_ids={"orders": Y},
                          restarts={"orders": ("runA", 2, 900)})
    monkeypatch.setattr(ledger_mod, "table_exists", lambda spark, t: True)
    monkeypatch.setattr(app_recreated, "table_exists", lambda spark, t: True)
    monkeypatch.setattr(ledger_mod, "read_watermark", lambda spark, t, p: table_now)
    marked: list[Any] = []
    monkeypatch.setattr(ledger_mod, "set_restarted", lambda *a: marked.append(a))
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, topics: {"orders": Y})  # Kafka: Y

    led = ledger_mod.Ledger(None, cfg, "runB")  # type: ignore[arg-type]
    led.topics.arm({"orders": X}, {})  # run B armed before the recreation: id X
    writer = SimpleNamespace(counters=SimpleNamespace(batches=0), tables=lambda: ["orders"],
                             q=lambda t: f"c.raw.{t}", watermark=led.watermark, forget_watermarks=led.forget,
                             topics=led.topics)

    r = Runner.__new__(Runner)
    r.cfg, r.spark, r.writer, r.run_id = cfg, None, writer, "runB"
    r.maintenance, r.query, r.restarts, r.fenced = None, None, 0, 0
    r._stop, r._stopped_by, r._idle_after = threading.Event(), "completed", 2.0
    waits: list[float] = []
    monkeypatch.setattr(r._stop, "wait", lambda s=None: waits.append(s) or len(waits) > 1)  # one poll, then stop
    starts = iter([SimpleNamespace(id="q1"), None])
    monkeypatch.setattr(r, "_start_or_wait", lambda budget: next(starts))

    def watch(deadline: Any, until_idle: bool) -> None:
        raise RuntimeError("icetide-fence: pipeline p expected its newest commit to be run runB batch 1, found "
                           "run runA batch 3")
    monkeypatch.setattr(r, "_watch", watch)

    r.run()  # before: the TransientError escaped _standby and ended the run
    assert marked == [] and waits  # nothing set aside; it stood by, then stopped when asked
