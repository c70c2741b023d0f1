"""Alerts reach a real HTTP webhook as JSON, and a broken webhook never stops collection."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from icetide.config.thresholds import HealthThresholds
from icetide.health import alerts
from icetide.health.model import PartitionHealth, TableHealth
from icetide.health.score import score_partition, score_table


def unhealthy() -> TableHealth:
    th = HealthThresholds(partition_files_warning=5, partition_files_critical=8)
    p = PartitionHealth('{"day":"2026-11-25"}', data_files=9, records=90, small_files=9)
    s = score_partition(p, th)
    p.score, p.tier, p.reasons = s.score, s.tier, s.reasons
    h = TableHealth("icetide.raw.events", 0, 1024, 768, [p], snapshots=3, manifests=3)
    t = score_table(h, th, 0)
    h.score, h.tier, h.reasons = t.score, t.tier, t.reasons
    return h


def test_alert_events_and_webhook() -> None:
    received: list[dict] = []  # type: ignore[type-arg]

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        events = alerts.alerts(unhealthy())
        alerts.emit(events, f"http://127.0.0.1:{server.server_port}/hook")
    finally:
        server.shutdown()
    assert received == [{"alerts": events}]
    table_level = [e for e in events if e["partition"] is None]
    assert {"event": "health_alert", "table": "icetide.raw.events", "partition": None, "severity": "critical",
            "reason": 'data files in partition {"day":"2026-11-25"} = 9 (critical at 8)',
            "score": unhealthy().score} in table_level
    assert any(e["partition"] == '{"day":"2026-11-25"}' and e["severity"] == "critical" for e in events)


def test_broken_webhook_is_logged_not_raised() -> None:
    # a handler of its own on the alerts logger: what other tests in this worker did to the root
    # logger's handlers (pytest's capture, a run's log setup) cannot hide the record
    logger = logging.getLogger("icetide.alerts")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    logger.addHandler(handler)
    try:
        alerts.emit(alerts.alerts(unhealthy()), "http://127.0.0.1:1/nothing-listens-here", timeout=2)
    finally:
        logger.removeHandler(handler)
    failed = [r for r in records if r.levelno == logging.ERROR and str(r.msg).startswith("alert webhook failed")]
    assert len(failed) == 1, (f"records: {[r.getMessage() for r in records]}; logger disabled={logger.disabled}, "
                              f"level={logger.getEffectiveLevel()}, manager.disable={logging.root.manager.disable}")
    assert "http://127.0.0.1:1/***" in failed[0].getMessage()  # the URL's path never shown
