"""Pure pieces of the read side: partition names as Spark spells them, the watermark fold from reader
facts, chart inputs, and terminal tables that fit 80 columns."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from rich.console import Console

from icetide.app import render
from icetide.health import charts
from icetide.health.model import PartitionHealth, TableHealth
from icetide.ingest.dead_letters import Filters
from icetide.lake.meta import Snapshot, SpecField, partition_key, spec_field
from icetide.lake.offsets import BatchRanges, commit_properties, watermark_from

pytestmark = pytest.mark.unit


def test_partition_key_is_sparks_to_json() -> None:
    assert partition_key({"d": date(2026, 11, 27), "s": "é", "n": None, "h": 493_000}) == \
        '{"d":"2026-11-27","s":"é","h":493000}'
    assert partition_key({"ts": datetime(2026, 11, 27, 1, 2, 3, 456789, tzinfo=UTC)}) == \
        '{"ts":"2026-11-27T01:02:03.456Z"}'
    assert partition_key({"b": 3, "a": 1}, order=["a", "b"]) == '{"a":1,"b":3}'
    assert partition_key({"x": Decimal("1.5"), "y": True}) == '{"x":1.5,"y":true}'
    assert partition_key({"n": None}) == "{}"
    assert partition_key(None) == ""


def test_spec_fields_use_sparks_transform_names() -> None:
    assert spec_field("d_day", "day", "d") == SpecField("d_day", "days", "d")
    assert spec_field("b", "bucket[4]", "id") == SpecField("b", "bucket", "id")
    assert spec_field("t", "truncate[2]", "s").transform == "truncate"
    assert spec_field("s", "identity", "s").transform == "identity"


def _snap(sid: int, ts: int, rank: int | None, batch: int, ends: dict[int, int], pipeline: str = "p") -> Snapshot:
    props = commit_properties(pipeline, "run", batch, BatchRanges({("t", k): (v - 1, v) for k, v in ends.items()}))
    return Snapshot(sid, ts, props, rank)


def test_watermark_from_reader_facts_folds_ancestors_only() -> None:
    snaps = [_snap(1, 1000, 2, 1, {0: 5}), _snap(2, 2000, 1, 2, {1: 7}), _snap(3, 3000, 0, 3, {0: 9}),
             _snap(4, 4000, None, 4, {0: 99}),  # not an ancestor (rolled back): ignored
             _snap(5, 3500, None, 9, {2: 1}, pipeline="other")]
    wm = watermark_from({}, snaps, "p")
    assert wm is not None and wm.batch == 3
    assert wm.offsets == {("t", 0): 9, ("t", 1): 7}
    assert watermark_from({}, snaps, "nobody") is None


def test_dead_letter_filters_match_rows() -> None:
    row = {"error_class": "type_mismatch", "_kafka_topic": "a", "target_table": "ns.t"}
    assert Filters().matches(row) and Filters("type_mismatch", "a", "ns.t").matches(row)
    assert not Filters(topic="b").matches(row) and not Filters("malformed_json").matches(row)


def test_series_points_and_partition_labels() -> None:
    at = datetime(2026, 11, 27, tzinfo=UTC)
    rows = [{"collected_at": at, "table_name": "cat.ns.t", "data_files": 3, "freshness_ms": None},
            {"collected_at_ms": 5, "table": "cat.ns.u", "data_files": 4}]
    assert charts.series_points(rows, "data_files", 1.0) == [
        {"t": int(at.timestamp() * 1000), "table": "ns.t", "value": 3.0}, {"t": 5, "table": "ns.u", "value": 4.0}]
    assert charts.series_points(rows, "freshness_ms", 1.0) == []
    assert charts.partition_label('{"event_time_day":"2026-11-27","kind":"a"}') == "2026-11-27/a"
    assert charts.partition_label("") == "(unpartitioned)"


def _health(name: str, tier: str = "healthy") -> TableHealth:
    h = TableHealth(name, 0, 128 << 20, 96 << 20, [PartitionHealth('{"d":"2026-11-27"}', data_files=3,
                                                                   data_bytes=3000, small_files=3)])
    h.tier, h.reasons = tier, (["-8.0: 3/3 small files"] if tier != "healthy" else [])
    return h


@pytest.mark.parametrize("width", [80, 60])
def test_status_fits_the_terminal_with_every_name_in_full(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    out = Console(width=width, record=True, force_terminal=False, color_system=None)
    monkeypatch.setattr(render, "console", out)
    names = ["icetide.demo.events", "icetide.analytics.page_views_by_country", "icetide.demo.dead_letters"]
    render.health_table([_health(n, "warning") for n in names])
    text = out.export_text()
    for n in names:
        assert n.split(".", 1)[1] in text, f"{n} not shown in full at {width} columns:\n{text}"
    assert "icetide.demo" not in text.split("catalog icetide")[0]  # the catalog is said once, in the caption
    assert max(len(line) for line in text.splitlines()) <= width, text
    assert "score" in text and "files" in text  # the most important figures stay


def test_wide_terminal_shows_every_status_column(monkeypatch: pytest.MonkeyPatch) -> None:
    out = Console(width=200, record=True, color_system=None)
    monkeypatch.setattr(render, "console", out)
    render.health_table([_health("icetide.demo.events")])
    text = out.export_text()
    assert all(header in text for header, *_ in render.STATUS_COLUMNS) and "hidden" not in text


def test_partition_table_names_partitions_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    out = Console(width=80, record=True, color_system=None)
    monkeypatch.setattr(render, "console", out)
    render.partition_table(_health("icetide.demo.events"))
    text = out.export_text()
    assert "2026-11-27" in text and '{"d"' not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_action_table_leaves_unknown_file_counts_blank(monkeypatch: pytest.MonkeyPatch) -> None:
    from icetide.maintenance.executor import ActionRecord

    out = Console(width=120, record=True)
    monkeypatch.setattr(render, "console", out)
    expired = ActionRecord("icetide.demo.events", "expire_snapshots", "ok", 0, result=[{"expired_snapshots": 13}])
    rewrite = ActionRecord("icetide.demo.events", "rewrite_data_files", "ok", 0, files_in=18, files_out=4)
    render.print_actions([expired, rewrite])
    text = out.export_text()
    assert "None" not in text
    assert "18 → 4" in text
