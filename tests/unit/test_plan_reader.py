"""Which metadata reader a maintenance cycle plans with (``maintenance.plan_with``), and its fallback."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from icetide.config import load_config
from icetide.errors import UnsupportedByReader
from icetide.maintenance import cycle
from icetide.maintenance.executor import ActionHistory, action_history
from tests.fixtures.configs import BASE, errors_for, write

pytestmark = pytest.mark.unit


class Reader:
    """Stands in for a PyIceberg reader: ``fresh()`` views, counted."""

    def __init__(self) -> None:
        self.views = 0

    def fresh(self) -> Reader:
        self.views += 1
        return self


class Spark:
    sparkContext = object()


def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan_with: str, opens: bool = True,
          fails: bool = False) -> tuple[Any, Reader, list[str]]:
    data = copy.deepcopy(BASE)
    data["maintenance"] = {"plan_with": plan_with}
    cfg = load_config(write(tmp_path, data))
    reader, used = Reader(), []

    def open_reader(_cfg: Any, spark: Any = None) -> Reader:
        if not opens:
            raise UnsupportedByReader("catalog type X")
        return reader

    def plan_all(source: Any, _cfg: Any, tables: Any = None, _now: Any = None, context: Any = None) -> list[Any]:
        used.append("spark" if hasattr(source, "sparkContext") else "pyiceberg")
        assert context is not None
        if fails and used[-1] == "pyiceberg":
            raise ValueError("a manifest PyIceberg cannot read")
        return []

    def plan_context(*_: Any) -> cycle.PlanContext:
        used.append("context")
        return cycle.PlanContext(ActionHistory(), {}, {})

    monkeypatch.setattr("icetide.lake.readers.open_reader", open_reader)
    monkeypatch.setattr(cycle, "plan_all", plan_all)
    monkeypatch.setattr(cycle, "plan_context", plan_context)
    monkeypatch.setattr(cycle, "as_reader", lambda _cfg, source: source)
    return cfg, reader, used


def test_auto_plans_through_pyiceberg_with_a_fresh_view_each_time(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, reader, used = setup(tmp_path, monkeypatch, "auto")
    p = cycle.PlanReader(Spark(), cfg)  # type: ignore[arg-type]
    p.plan(None)
    p.plan(["a.b"])
    assert used == ["context", "pyiceberg", "pyiceberg"]  # the action log and telemetry: read once per cycle
    assert reader.views == 2


def test_auto_falls_back_to_spark_for_the_rest_of_the_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _, used = setup(tmp_path, monkeypatch, "auto", fails=True)
    p = cycle.PlanReader(Spark(), cfg)  # type: ignore[arg-type]
    p.plan(None)
    p.plan(["a.b"])
    assert used == ["context", "pyiceberg", "spark", "spark"]


def test_auto_uses_spark_when_pyiceberg_cannot_open_the_catalog(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _, used = setup(tmp_path, monkeypatch, "auto", opens=False)
    cycle.PlanReader(Spark(), cfg).plan(None)  # type: ignore[arg-type]
    assert used == ["context", "spark"]


def test_spark_and_pyiceberg_are_taken_at_their_word(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _, used = setup(tmp_path, monkeypatch, "spark")
    cycle.PlanReader(Spark(), cfg).plan(None)  # type: ignore[arg-type]
    assert used == ["context", "spark"]
    cfg, _, used = setup(tmp_path, monkeypatch, "pyiceberg", fails=True)
    with pytest.raises(ValueError, match="manifest"):
        cycle.PlanReader(Spark(), cfg).plan(None)  # type: ignore[arg-type]
    cfg, _, _ = setup(tmp_path, monkeypatch, "pyiceberg", opens=False)
    with pytest.raises(UnsupportedByReader):
        cycle.PlanReader(Spark(), cfg)  # type: ignore[arg-type]


def test_plan_with_rejects_unknown_values(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["maintenance"] = {"plan_with": "duckdb"}
    assert "maintenance.plan_with" in errors_for(tmp_path, data)


class LogReader:
    """Stands in for a metadata reader over icetide's action log: its rows, as ``reader.rows`` gives them."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.log = rows

    def exists(self, _table: str) -> bool:
        return True

    def rows(self, _table: str, columns: list[str], since: Any = None) -> list[dict[str, Any]]:
        assert since is not None and since[0] == "started_at"
        return [{c: r.get(c) for c in columns} for r in self.log]


def test_action_history_gives_the_last_full_compaction_of_each_partition() -> None:
    def row(table: str, step: str, at: str, outcome: str = "ok", partitions: Any = None) -> dict[str, Any]:
        args = json.dumps({"args": {}, "options": {}, **({"partitions": partitions} if partitions is not None else {})})
        return {"table_name": table, "step": step, "outcome": outcome, "started_at": datetime.fromisoformat(at),
                "arguments": args}

    h = action_history(LogReader([  # type: ignore[arg-type]
        row("c.ns.t", "rewrite_data_files", "2026-11-28T01:00:00+00:00", partitions=['{"h":1}', '{"h":2}']),
        row("c.ns.t", "rewrite_data_files", "2026-11-28T01:05:00+00:00", partitions=['{"h":2}']),
        row("c.ns.t", "rewrite_data_files", "2026-11-28T01:09:00+00:00", "failed", partitions=['{"h":3}']),
        row("c.ns.t", "rewrite_hot_files", "2026-11-28T01:10:00+00:00", partitions=['{"h":4}']),  # minor: not a close
        row("c.ns.u", "rewrite_data_files", "2026-11-28T00:30:00+00:00"),  # logged before partitions were
        row("c.ns.u", "expire_snapshots", "2026-11-28T00:40:00+00:00", partitions="not a list"),
    ]), "ns.log", now_ms=int(datetime.fromisoformat("2026-11-28T02:00:00+00:00").timestamp() * 1000))
    ms = {t: int(datetime.fromisoformat(t).timestamp() * 1000)
          for t in ("2026-11-28T01:00:00+00:00", "2026-11-28T01:05:00+00:00", "2026-11-28T01:10:00+00:00",
                    "2026-11-28T00:40:00+00:00")}
    assert h.compacted == {"c.ns.t": {'{"h":1}': ms["2026-11-28T01:00:00+00:00"],
                                      '{"h":2}': ms["2026-11-28T01:05:00+00:00"]}, "c.ns.u": {}}
    assert h.last_ok == {"c.ns.t": ms["2026-11-28T01:10:00+00:00"], "c.ns.u": ms["2026-11-28T00:40:00+00:00"]}
