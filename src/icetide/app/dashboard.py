"""``icetide ui``: a live dashboard on 127.0.0.1, served by the standard library.

A :class:`DashboardLoop` (a :class:`~icetide.loops.LoopService`) reads the catalog through a
JVM-free :class:`~icetide.lake.meta.MetaReader` every ``interval`` seconds into one JSON text,
swapped in whole; the HTTP handler only serves the newest state (``/api/state``), the page
(``/``) and Vega's JavaScript (``/vega.js``). The page polls and redraws, so figures update while
the pipeline runs. Nothing here writes to a table.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from icetide.app.dashboard_page import PAGE
from icetide.config.models import PipelineConfig
from icetide.health import charts
from icetide.lake.meta import MetaReader
from icetide.loops import LoopService

log = logging.getLogger(__name__)

#: live collections kept, all tables together (8 tables every 5 s: about 3 hours)
MAX_LIVE = 16_000


class DashboardLoop(LoopService):
    """Collects the dashboard's state every ``interval``; the newest is in :attr:`state` (JSON text)."""

    name = "dashboard"

    def __init__(self, reader: MetaReader, cfg: PipelineConfig, interval: float, hours: float = 24.0) -> None:
        super().__init__(interval)
        self.reader, self.cfg, self.hours = reader, cfg, hours
        self.version = 0
        self.state = json.dumps({"version": 0, "tables": []})
        self._live: deque[dict[str, Any]] = deque(maxlen=MAX_LIVE)
        self._history: list[dict[str, Any]] | None = None
        self._lock = threading.Lock()

    def tick(self) -> None:
        from icetide.health.report import history_rows, maintenance_rows
        from icetide.health.watch import collect_all
        from icetide.ingest.dead_letters import Filters, list_groups
        from icetide.maintenance.cycle import plan_all

        reader = self.reader.fresh()
        if self._history is None:  # recorded history once; live collections are added as they come
            self._history = history_rows(reader, self.cfg, self.hours)
        healths = collect_all(reader, self.cfg, alert=False)
        for h in healths:
            self._live.append({**h.summary(), "table_name": h.table})
        plans = plan_all(reader, self.cfg, healths=healths)  # what `icetide plan` shows, without collecting again
        dead = list_groups(reader, self.cfg, Filters())
        rows = [*self._history, *self._live]
        state = {
            "version": self.version + 1,
            "collected_at_ms": int(time.time() * 1000),
            "catalog": reader.catalog,
            "tables": [{**h.summary(), "name": charts.short_name(h.table)} for h in healths],
            "reasons": {charts.short_name(h.table): h.reasons for h in healths},
            "heatmap": charts.heatmap(charts.partition_cells(healths)),
            "series": [{"figure": key, "spec": charts.timeseries(points, title, unit, charts.table_domain(rows))}
                       for key, title, unit, scale in charts.SERIES
                       if (points := charts.series_points(rows, key, scale))],
            "plan": [p.as_dict() for p in plans],
            "actions": [{**a, "table_name": charts.short_name(a["table_name"])}
                        for a in maintenance_rows(reader, self.cfg, self.hours, limit=30)],
            "dead_letters": asdict(dead),
        }
        text = json.dumps(state, default=str)
        with self._lock:
            self.version += 1
            self.state = text

    def snapshot(self) -> str:
        with self._lock:
            return self.state


def serve(loop: DashboardLoop, host: str, port: int) -> ThreadingHTTPServer:
    """Start the HTTP server in a daemon thread; the caller runs ``loop`` and shuts the server down."""
    page = PAGE.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path in ("/", "/index.html"):
                self._send(page, "text/html; charset=utf-8")
            elif self.path == "/api/state":
                self._send(loop.snapshot().encode(), "application/json", cache=False)
            elif self.path == "/vega.js":
                self._send(charts.vega_bundle().encode(), "text/javascript; charset=utf-8", cache=True)
            else:
                self.send_error(404)

        def _send(self, body: bytes, kind: str, cache: bool = False) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "max-age=86400" if cache else "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("ui: " + fmt, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="icetide-ui", daemon=True).start()
    return server
