"""Alerts: thresholds crossed become structured log events and, if configured, a webhook POST."""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

from icetide.health.model import TableHealth
from icetide.secrets import safe_url

log = logging.getLogger("icetide.alerts")


def alerts(h: TableHealth) -> list[dict[str, Any]]:
    """One event per crossed threshold (table level and partition level)."""
    out = []
    for reason in h.reasons:
        level, _, what = reason.partition(": ")
        if level in ("warning", "critical"):
            out.append({"event": "health_alert", "table": h.table, "partition": None, "severity": level,
                        "reason": what, "score": h.score})
    for p in h.partitions:
        for reason in p.reasons:
            level, _, what = reason.partition(": ")
            if level in ("warning", "critical"):
                out.append({"event": "health_alert", "table": h.table, "partition": p.partition,
                            "severity": level, "reason": what, "score": p.score})
    return out


def emit(events: list[dict[str, Any]], webhook_url: str | None = None, timeout: float = 10.0) -> None:
    for e in events:
        (log.error if e["severity"] == "critical" else log.warning)(json.dumps(e, sort_keys=True))
    if webhook_url and events:
        body = json.dumps({"alerts": events}).encode()
        req = urllib.request.Request(webhook_url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout):
                pass
        except OSError as err:  # a broken webhook must not stop collection
            log.error("alert webhook failed (%s): %s", safe_url(webhook_url), getattr(err, "reason", err))
