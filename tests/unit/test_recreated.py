"""A topic deleted and created again under its name (#41): the decisions, without a JVM or a broker.
The real-stack test is tests/integration/test_guarantees.py::test_item15_*."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from icetide.config import load_config
from icetide.errors import TopicRecreatedError
from icetide.ingest import recreated
from icetide.ingest.recreated import KafkaTopics, Recreated, Topics
from icetide.lake.offsets import (
    K_TOPIC_IDS,
    BatchRanges,
    Watermark,
    commit_properties,
    fold_watermark,
    resume_offsets,
)
from tests.fixtures.configs import BASE, write

X, Y = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"  # two topic ids (base64, as Kafka prints them)


# -- at a query's start: recorded vs now ----------------------------------------------------------
def test_a_new_topic_id_is_a_recreated_topic_whatever_its_offsets() -> None:
    kafka = KafkaTopics({"t": Y, "u": X}, {"t": [0], "u": [0]}, {("t", 0): 25_000, ("u", 0): 7})
    # refilled past the old position: only the id tells
    found = recreated.recreated_topics(kafka, {"t": {X}, "u": {X}}, {("t", 0): 20_000, ("u", 0): 7})
    assert list(found) == ["t"]
    assert found["t"].describe() == f"topic id {X} -> {Y}"
    # a recorded id equal to Kafka's: the same topic, even with an offset beyond its end (a truncation)
    assert recreated.recreated_topics(kafka, {"t": {Y}}, {("t", 0): 30_000}) == {}
    # one of several recorded ids is Kafka's: a run already restarted it
    assert recreated.recreated_topics(kafka, {"t": {X, Y}}, {}) == {}


def test_without_a_recorded_id_an_offset_beyond_the_end_or_a_gone_partition_tells() -> None:
    """The issue as reported: 20,000 records read, the topic recreated, 5,000 produced."""
    kafka = KafkaTopics({"t": Y}, {"t": [0, 1]}, {("t", 0): 5_000, ("t", 1): 0})
    found = recreated.recreated_topics(kafka, {}, {("t", 0): 20_000, ("t", 1): 0, ("t", 2): 4})
    assert found["t"].beyond == {("t", 0): (20_000, 5_000), ("t", 2): (4, None)}
    text = found["t"].describe()
    assert "partition 0: offset 20000 recorded, the topic now ends at 5000" in text
    assert "the topic has no partition 2 now" in text
    # offsets at or below the ends: nothing to say
    assert recreated.recreated_topics(kafka, {}, {("t", 0): 5_000, ("t", 1): 0}) == {}
    # Kafka does not tell ids: the offsets still do
    no_ids = KafkaTopics({}, {"t": [0]}, {("t", 0): 10})
    assert list(recreated.recreated_topics(no_ids, {"t": {X}}, {("t", 0): 11})) == ["t"]
    # an end Kafka did not give is no evidence
    assert recreated.recreated_topics(KafkaTopics({}, {"t": [0]}, {}), {}, {("t", 0): 11}) == {}


def test_stop_names_the_topic_and_the_fix() -> None:
    text = recreated.stop_message("orders", {"t": Recreated("t", X, Y)})
    assert text.startswith("source.on_topic_recreated: topic 't'")
    assert "pipeline 'orders'" in text and "Nothing was written" in text
    assert "set source.on_topic_recreated: restart" in text and "\n" not in text


# -- a table's ledger --------------------------------------------------------------------------------
def _wm(**kw: Any) -> Watermark:
    base: dict[str, Any] = {"offsets": {("t", 0): 20_000, ("u", 0): 30}, "run": "r1", "batch": 7,
                            "committed_at_ms": 1_000}
    return Watermark(**{**base, **kw})


def test_which_offsets_of_a_table_belong_to_a_deleted_topic() -> None:
    stale = recreated.stale_topics
    # the table recorded another id than Kafka's: set aside, only that topic
    assert stale(_wm(topic_ids={"t": X, "u": X}), {"t": Y, "u": X}, {}, set()) == {"t": Y}
    # no id recorded (an older icetide): kept, unless this run found the topic recreated
    assert stale(_wm(), {"t": Y, "u": X}, {}, set()) == {}
    assert stale(_wm(), {"t": Y}, {"t": Recreated("t")}, set()) == {"t": Y}
    # ... once per table and run, also where Kafka does not tell ids
    assert stale(_wm(), {}, {"t": Recreated("t")}, set()) == {"t": None}
    assert stale(_wm(), {}, {"t": Recreated("t")}, {"t"}) == {}
    # the table already holds the new topic's id (set aside before): kept
    assert stale(_wm(topic_ids={"t": Y}), {"t": Y}, {"t": Recreated("t", X, Y)}, set()) == {}


def test_set_aside_offsets_never_come_back_from_older_snapshots() -> None:
    older = commit_properties("p", "r0", 6, BatchRanges({("t", 0): (0, 19_000), ("u", 0): (0, 20)}), {"t": X})
    newest = commit_properties("p", "r1", 7, BatchRanges({("t", 0): (19_000, 20_000), ("u", 0): (20, 30)}))
    tagged = [(newest, 1_000), (older, 900)]
    read = fold_watermark(None, tagged)
    assert read is not None and read.offsets == {("t", 0): 20_000, ("u", 0): 30} and read.topic_ids == {"t": X}
    aside = read.restarted({"t": Y})
    assert aside.offsets == {("u", 0): 30} and aside.topic_ids == {"t": Y}
    assert aside.restarts == {"t": ("r1", 7, 1_000)} and (aside.run, aside.batch) == ("r1", 7)  # the fence's base
    assert aside.batch_ranges is not None and ("t", 0) not in aside.batch_ranges.ranges
    prop = Watermark.from_property(aside.to_property())
    assert prop.restarts == aside.restarts and prop.topic_ids == {"t": Y}
    # the next read: the property and the same snapshots; then the new topic's first commits
    again = fold_watermark(prop, tagged)
    assert again is not None and again.offsets == {("u", 0): 30} and again.topic_ids == {"t": Y}
    later = commit_properties("p", "r2", 0, BatchRanges({("t", 0): (0, 1_500), ("u", 0): (30, 31)}))
    now = fold_watermark(prop, [(later, 2_000), *tagged])
    assert now is not None and now.offsets == {("t", 0): 1_500, ("u", 0): 31}
    assert now.restarts == aside.restarts and now.topic_ids == {"t": Y}
    # a lost checkpoint resumes the recreated topic from its start: no offset of the deleted one
    assert resume_offsets([again]) == {("u", 0): 20}  # (u: from its newest batch's start, as ever)
    # a snapshot that merely repeats (run, batch) but not the commit time is not the mark
    same_ids = commit_properties("p", "r1", 7, BatchRanges({("t", 0): (0, 10)}))
    assert (fold_watermark(prop, [(same_ids, 3_000), *tagged]) or Watermark()).offsets[("t", 0)] == 10


def test_the_property_and_summary_formats_only_gain_keys() -> None:
    wm = _wm(batch_ranges=BatchRanges({("t", 0): (0, 20_000)}))
    old = ('{"batch":7,"batch_offsets":{"t":{"0":[0,20000]}},"committed_at_ms":1000,"kafka_ts_max":null,'
           '"run":"r1","watermark":{"t":{"0":20000},"u":{"0":30}}}')
    assert wm.to_property() == old  # no ids, no restarts: byte for byte what earlier versions wrote
    read = Watermark.from_property(old)
    assert read.topic_ids == {} and read.restarts == {} and read.offsets == wm.offsets
    ranges = BatchRanges({("t", 0): (0, 5)})
    assert K_TOPIC_IDS not in commit_properties("p", "r", 1, ranges)
    assert json.loads(commit_properties("p", "r", 1, ranges, {"t": Y})[K_TOPIC_IDS]) == {"t": Y}


def test_a_commit_records_the_ids_the_table_does_not_hold_yet() -> None:
    ranges = BatchRanges({("t", 0): (0, 5), ("u", 0): (3, 3), ("v", 0): (1, 2)})
    assert recreated.ids_to_record(None, ranges, {"t": X, "u": X}) == {"t": X}  # u: no records in the batch
    assert recreated.ids_to_record(_wm(topic_ids={"t": X}), ranges, {"t": X, "v": Y}) == {"v": Y}
    assert recreated.ids_to_record(_wm(topic_ids={"t": X}), ranges, {}) == {}


# -- while the pipeline runs -------------------------------------------------------------------------
def test_a_batch_asks_kafka_only_when_offsets_go_back_or_a_topic_appears() -> None:
    assert recreated.suspects({("t", 0): 5}, {("t", 0): 9}) == ({}, set())
    back, appeared = recreated.suspects({("t", 0): 20_000, ("u", 0): -2}, {("t", 0): 100, ("u", 0): 0, ("v", 0): 3})
    assert back == {("t", 0): (20_000, 100)} and appeared == {"v"}
    found, learned = recreated.in_run({"t": X}, {"t": Y, "v": X}, back, appeared)
    assert found == {"t": Recreated("t", X, Y)} and learned == {"v": X}
    # offsets back under the same id: a truncation, not a recreation (a warning)
    assert recreated.in_run({"t": X}, {"t": X}, back, set()) == ({}, {"t": X})
    # no id to tell: offsets back count as recreated
    found, _ = recreated.in_run({}, {}, back, set())
    assert found["t"].beyond == {("t", 0): (20_000, 100)}
    # a topic that was deleted and comes back (Spark reads it from its earliest offset)
    assert list(recreated.in_run({"t": X}, {"t": Y}, {}, {"t"})[0]) == ["t"]


def _config(tmp_path: Path, mode: str = "restart") -> Any:
    return load_config(write(tmp_path, {**BASE, "source": {**BASE["source"], "on_topic_recreated": mode}}))


def test_a_batch_that_finds_its_topic_recreated_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    cfg = _config(tmp_path)
    topics = Topics(cfg.source, cfg.name)
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, names: {"orders": Y})
    topics.check_batch(None, "ckpt", 3, {("orders", 0): 20_000}, {("orders", 0): 10})  # type: ignore[arg-type]
    assert topics.pending == {}  # not armed yet: the runner has not compared anything
    topics.arm({"orders": X}, {})
    with pytest.raises(TopicRecreatedError, match=r"batch 3: topic 'orders' \(topic id .* -> .*\).*restart"):
        topics.check_batch(None, "ckpt", 3, {("orders", 0): 20_000}, {("orders", 0): 10})  # type: ignore[arg-type]
    assert list(topics.pending) == ["orders"]
    # deleted before the run started (Kafka had no such topic then), created again while it runs
    back = Topics(cfg.source, cfg.name)
    back.arm({}, {}, recorded={"orders": X})
    with pytest.raises(TopicRecreatedError, match="topic 'orders'"):
        back.check_batch(None, "ckpt", 4, {}, {("orders", 0): 10})  # type: ignore[arg-type]
    stop = Topics(_config(tmp_path, "stop").source, "orders")
    stop.arm({"orders": X}, {})
    with pytest.raises(TopicRecreatedError, match=r"source\.on_topic_recreated: topic 'orders'"):
        stop.check_batch(None, "ckpt", 3, {("orders", 0): 20_000}, {("orders", 0): 10})  # type: ignore[arg-type]


# -- the ledger and the start of a run, with Spark and Kafka faked -------------------------------------
def test_the_ledger_sets_a_recreated_topic_aside_for_that_topic_only(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from icetide.ingest import ledger as ledger_mod

    written: dict[str, Watermark] = {}
    stored = _wm(topic_ids={"orders": X, "u": X}, offsets={("orders", 0): 20_000, ("u", 0): 30})
    monkeypatch.setattr(ledger_mod, "table_exists", lambda spark, table: True)
    monkeypatch.setattr(ledger_mod, "read_watermark", lambda spark, table, pipeline: stored)
    marked: list[tuple[dict[str, str | None], str]] = []

    def set_restarted(spark: Any, table: str, pipeline: str, wm: Watermark, topics: dict[str, str | None],
                      run: str) -> None:
        written.update({table: wm})
        marked.append((topics, run))

    monkeypatch.setattr(ledger_mod, "set_restarted", set_restarted)
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, topics: {"orders": Y})  # Kafka agrees
    cfg = _config(tmp_path)
    led = ledger_mod.Ledger(None, cfg, "run2")  # type: ignore[arg-type]
    assert led.watermark("c.raw.orders") is stored  # not armed: as recorded
    led.forget()
    led.topics.arm({"orders": Y, "u": X}, {})
    wm = led.watermark("c.raw.orders")
    assert wm is not None and wm.offsets == {("u", 0): 30} and written["c.raw.orders"] is wm
    assert marked == [({"orders": Y}, "run2")]  # the marks go into their own property too, which no mirror writes
    pending = led.begin("c.raw.orders", 0, BatchRanges({("orders", 0): (0, 5_000), ("u", 0): (30, 31)}))
    assert pending is not None and pending.keep is None  # every record of the new topic is written
    assert pending.base == ("r1", 7)  # the fence still expects the table's newest commit
    assert pending.watermark.offsets == {("orders", 0): 5_000, ("u", 0): 31}
    assert "icetide.topic-ids" not in pending.tags  # the property already holds the new id
    # the commit carries the mark of the topic it touches (a run that had not seen it would not)
    assert list(json.loads(pending.tags["icetide.restart-marks"])) == ["orders"]
    led.forget()  # a failure: read again, not set aside twice (the table now holds the new id)
    stored = Watermark.from_property(written["c.raw.orders"].to_property())
    assert led.watermark("c.raw.orders") is stored and len(written) == 1
    stop = ledger_mod.Ledger(None, _config(tmp_path, "stop"), "run3")  # type: ignore[arg-type]
    stop.topics.arm({"orders": Y}, {})
    stored = _wm(topic_ids={"orders": X}, offsets={("orders", 0): 20_000})
    with pytest.raises(TopicRecreatedError, match=r"topic 'orders'.*Nothing more was written to c\.raw\.orders\."):
        stop.watermark("c.raw.orders")


class _Writer:
    """What :func:`icetide.app.recreated.at_start` uses of the BatchWriter."""

    def __init__(self, cfg: Any, held: dict[str, Watermark]) -> None:
        from icetide.ingest.batch_log import PipelineCounters

        self.topics = Topics(cfg.source, cfg.name)
        self.counters = PipelineCounters()
        self.by_table, self.read = held, []  # type: ignore[var-annotated]
        self.cfg = cfg
        self.ledger = self  # its forget()

    def q(self, t: str) -> str:
        return f"icetide.{t}"

    def tables(self) -> list[str]:
        return ["raw.orders", "raw.orders_dlq"]

    def forget(self) -> None:
        pass

    def watermark(self, table: str) -> Watermark | None:
        self.read.append((table, self.topics.armed))
        return self.by_table.get(table)

    def nexts(self) -> dict[str, dict[tuple[str, int], int]]:  # the BatchWriter's
        return {t: wm.offsets for t in self.tables() if (wm := self.watermark(self.q(t))) is not None}


def _start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, sidecar: dict[str, str],
           planned: dict[tuple[str, int], int], orders_end: int = 5_000) -> tuple[str | None, _Writer, list[str]]:
    from icetide.app import recreated as app_recreated
    from icetide.ingest import source
    from icetide.lake import checkpoint

    kafka = KafkaTopics({"orders": Y}, {"orders": [0], "other": [0]}, {("orders", 0): orders_end, ("other", 0): 90})
    moved: list[str] = []
    monkeypatch.setattr(recreated, "probe", lambda src: kafka)
    monkeypatch.setattr(checkpoint, "read_topic_ids", lambda spark, loc: sidecar)
    monkeypatch.setattr(checkpoint, "recorded_offsets", lambda spark, loc: planned)
    monkeypatch.setattr(checkpoint, "resume_position", lambda spark, loc: {("orders", 0): 20_000, ("other", 0): 80})
    monkeypatch.setattr(checkpoint, "set_aside", lambda spark, loc: moved.append(loc) or f"{loc}.recreated-x")
    monkeypatch.setattr(app_recreated, "table_exists", lambda spark, table: True)  # the fake writer's tables
    monkeypatch.setattr(source, "list_partitions", lambda src: kafka.partitions)
    monkeypatch.setattr(source, "low_watermarks", lambda src, tps: {tp: 0 for tp in tps})
    cfg = load_config(write(tmp_path, {**BASE, "source": {**BASE["source"], "topics": ["orders", "other"],
                                                           "on_topic_recreated": mode}}))
    writer = _Writer(cfg, {})
    return app_recreated.at_start(None, cfg, writer, True), writer, moved  # type: ignore[arg-type]


def test_a_checkpoint_without_ids_is_checked_against_the_tables_ids(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint's ids file lost (or a restored checkpoint): the tables' ids still tell the
    recreated topic (was: resumed at the old position, the new topic's records below it skipped)."""
    tables = {"icetide.raw.orders": _wm(offsets={("orders", 0): 20_000}, topic_ids={"orders": X})}
    monkeypatch.setattr(_Writer, "__init__", _writer_with(tables))
    # the new topic refilled past the old position: its offsets alone would not tell
    offsets, writer, moved = _start(tmp_path, monkeypatch, "restart", {}, {("orders", 0): 20_000, ("other", 0): 85},
                                    orders_end=30_000)
    assert list(writer.topics.restarted) == ["orders"] and len(moved) == 1
    assert offsets is not None and json.loads(offsets)["orders"] == {"0": -2}


def _writer_with(tables: dict[str, Watermark]) -> Any:
    init = _Writer.__init__

    def patched(self: _Writer, cfg: Any, held: dict[str, Watermark]) -> None:
        init(self, cfg, {**held, **tables})
    return patched


def test_a_run_restarts_only_the_recreated_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets, writer, moved = _start(tmp_path, monkeypatch, "restart", {"orders": X, "other": X},
                                    {("orders", 0): 20_000, ("other", 0): 85})
    # the recreated topic from its earliest offset; the other exactly where the checkpoint was
    assert offsets is not None and json.loads(offsets) == {"orders": {"0": -2}, "other": {"0": 80}}
    assert len(moved) == 1 and writer.topics.armed and list(writer.topics.restarted) == ["orders"]
    assert writer.counters.recreated == {"orders": f"topic id {X} -> {Y}"}
    # every table of the pipeline is read (armed) so that its old offsets are set aside now
    assert ("icetide.raw.orders", True) in writer.read and ("icetide.raw.orders_dlq", True) in writer.read


def test_the_issue_as_reported_without_a_recorded_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets, writer, moved = _start(tmp_path, monkeypatch, "restart", {}, {("orders", 0): 20_000, ("other", 0): 85})
    assert offsets is not None and json.loads(offsets)["orders"] == {"0": -2} and moved
    assert "offset 20000 recorded, the topic now ends at 5000" in writer.counters.recreated["orders"]


def test_stop_ends_the_run_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TopicRecreatedError, match=r"topic 'orders' \(topic id .*\).*set source.on_topic_recreated: "
                                                  "restart"):
        _start(tmp_path, monkeypatch, "stop", {"orders": X}, {("orders", 0): 20_000})


def test_nothing_happens_to_a_topic_that_was_not_recreated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets, writer, moved = _start(tmp_path, monkeypatch, "stop", {"orders": Y, "other": X}, {("orders", 0): 4_000})
    assert offsets is None and not moved and writer.topics.armed and writer.topics.restarted == {}
    assert writer.topics.ids == {"orders": Y}


def test_the_run_reports_it_and_a_batch_s_error_stops_it_with_one_line() -> None:
    from icetide.app.runner import RunSummary, _recreated_line, _terminal
    from icetide.ingest.batch_log import PipelineCounters

    counters = PipelineCounters()
    counters.recreated["orders"] = f"topic id {X} -> {Y}"
    text = RunSummary("r", counters, "idle").describe()
    assert text.endswith(f"; topic orders was deleted and created again (topic id {X} -> {Y}): read from its start")
    assert TopicRecreatedError("x").terminal  # `icetide run` exits 2
    wrapped = RuntimeError("An exception was raised by the Python Proxy. Return Message: Traceback (most recent "
                           "call last):\n  File ...\nicetide.errors.TopicRecreatedError: source.on_topic_recreated: "
                           "topic 'orders' (…) was deleted and created again\n")
    assert _recreated_line(wrapped).startswith("source.on_topic_recreated: topic 'orders'")
    assert _terminal(wrapped)


def test_topic_ids_are_written_as_kafka_prints_them_and_fit_a_table_property() -> None:
    """librdkafka prints topic ids in standard base64; a ``+`` or ``/`` in one made the mirror refuse
    the watermark (found on the real stack). Kafka's form is URL-safe."""
    from confluent_kafka import Uuid

    from icetide.ingest.source import id_text
    from icetide.lake.offsets import property_value

    uuid = Uuid(-1, -1)  # all bits set: '/' in every position of the standard alphabet
    assert "/" in str(uuid) or "+" in str(uuid)
    text = id_text(uuid)
    assert text == "_" * 21 + "w" and id_text(Uuid(0, 0)) == "" and id_text(None) == ""
    assert json.loads(property_value(_wm(topic_ids={"t": text})))["topic_ids"] == {"t": text}


# -- a start Kafka did not answer (chaos seed 4327) -----------------------------------------------------
def test_a_start_kafka_did_not_answer_leaves_the_check_to_the_first_batch(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Chaos seed 4327 in CI: the first records of a recreated topic were missing, none reported. A
    start whose question to Kafka failed ran unarmed, so a batch replaying the checkpoint's plan (no
    offsets going back) or Spark's skip to the new end went unchecked. Now the batch asks first."""
    from icetide.app import recreated as app_recreated
    from icetide.lake import checkpoint

    def down(src: Any) -> KafkaTopics:
        raise OSError("Kafka did not answer")

    monkeypatch.setattr(recreated, "probe", down)
    monkeypatch.setattr(app_recreated.time, "sleep", lambda s: None)
    monkeypatch.setattr(checkpoint, "read_topic_ids", lambda spark, loc: {"orders": X, "other": X})
    monkeypatch.setattr(checkpoint, "recorded_offsets", lambda spark, loc: {("orders", 0): 20_000, ("other", 0): 85})
    monkeypatch.setattr(app_recreated, "table_exists", lambda spark, table: True)  # the fake writer's tables
    cfg = load_config(write(tmp_path, {**BASE, "source": {**BASE["source"], "topics": ["orders", "other"]}}))
    writer = _Writer(cfg, {})
    assert app_recreated.at_start(None, cfg, writer, True) is None  # type: ignore[arg-type]
    topics = writer.topics
    assert topics.armed and topics.unverified == {"orders", "other"}
    # Kafka answers the batch: "orders" has a new id, "other" is the same topic
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, names: {"orders": Y, "other": X})
    monkeypatch.setattr(recreated.source, "end_offsets", lambda src, tps: {})
    with pytest.raises(TopicRecreatedError, match=r"batch 7: topic 'orders' \(topic id"):
        # the checkpoint's planned batch replayed: nothing goes back, only the id tells
        topics.check_batch(None, "ckpt", 7, {("orders", 0): 19_000, ("other", 0): 80},  # type: ignore[arg-type]
                           {("orders", 0): 20_000, ("other", 0): 85})
    assert list(topics.pending) == ["orders"] and topics.unverified == set()


def test_a_batch_writes_nothing_while_kafka_cannot_tell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from icetide.errors import TransientError

    topics = Topics(_config(tmp_path).source, "orders")
    topics.arm({}, {}, {"orders": X}, {"orders"}, {("orders", 0): 20_000})
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, names: {})
    monkeypatch.setattr(recreated.source, "end_offsets", lambda src, tps: {})
    with pytest.raises(TransientError, match=r"batch 2: Kafka did not tell whether topic\(s\) orders"):
        topics.check_batch(None, "ckpt", 2, {("orders", 0): 19_000}, {("orders", 0): 20_000})  # type: ignore[arg-type]
    assert topics.unverified == {"orders"} and topics.pending == {}
    # the same topic (its recorded id): checked once, then batches go on without asking
    asked: list[list[str]] = []
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, names: asked.append(names) or {"orders": X})
    topics.check_batch(None, "ckpt", 2, {("orders", 0): 19_000}, {("orders", 0): 20_000})  # type: ignore[arg-type]
    topics.check_batch(None, "ckpt", 3, {("orders", 0): 20_000}, {("orders", 0): 21_000})  # type: ignore[arg-type]
    assert asked == [["orders"]] and topics.unverified == set() and topics.pending == {}


def test_what_the_first_batch_decides_for_a_topic_the_start_could_not_check() -> None:
    rec = {("t", 0): 500, ("t", 1): 510}
    # by id, whatever the offsets
    assert recreated.verdicts({"t"}, {"t": X}, {"t": Y}, rec, {})[0] == {"t": Recreated("t", X, Y)}
    assert recreated.verdicts({"t"}, {"t": X}, {"t": X}, rec, {}) == ({}, {"t": X}, set())
    # no id now: a recorded offset beyond the end tells; ends at or above the records do not tell an
    # id recorded before (refilled past it?), they do where none was ever recorded (an older icetide)
    found, _, unknown = recreated.verdicts({"t"}, {"t": X}, {}, rec, {("t", 0): 3, ("t", 1): 2})
    assert found["t"].beyond == {("t", 0): (500, 3), ("t", 1): (510, 2)} and unknown == set()
    assert recreated.verdicts({"t"}, {"t": X}, {}, rec, {("t", 0): 900, ("t", 1): 900}) == ({}, {}, {"t"})
    assert recreated.verdicts({"t"}, {}, {}, rec, {("t", 0): 900, ("t", 1): 900}) == ({}, {}, set())
    # an end missing: unknown
    assert recreated.verdicts({"t"}, {}, {}, rec, {("t", 0): 900}) == ({}, {}, {"t"})


def test_a_start_with_no_id_or_end_for_a_recorded_topic_leaves_it_to_the_first_batch() -> None:
    kafka = KafkaTopics({"u": X}, {"t": [0, 1], "u": [0]}, {("t", 0): 9})
    rec = {("t", 0): 5, ("t", 1): 7, ("u", 0): 3}
    assert recreated.undecided(kafka, {"t": {X}, "u": {X}}, rec, {}) == {"t"}  # no id for t now
    assert recreated.undecided(kafka, {}, rec, {}) == {"t"}  # no end for t[1]
    assert recreated.undecided(kafka, {}, {("t", 0): 5}, {}) == set()  # every recorded end known
    assert recreated.undecided(kafka, {"t": {X}}, rec, {"t": Recreated("t")}) == set()  # already found


def test_a_start_kafka_did_not_answer_takes_the_tables_ids_where_the_checkpoint_has_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's first hole: the checkpoint's ids file lacks 'orders' (its write failed), the tables
    hold X; Kafka does not answer the start; 'orders' was recreated (Y) and refilled past the old offset."""
    from icetide.app import recreated as app_recreated
    from icetide.lake import checkpoint

    def down(src: Any) -> KafkaTopics:
        raise OSError("Kafka did not answer")

    monkeypatch.setattr(recreated, "probe", down)
    monkeypatch.setattr(app_recreated.time, "sleep", lambda s: None)
    monkeypatch.setattr(checkpoint, "read_topic_ids", lambda spark, loc: {"other": X})
    monkeypatch.setattr(checkpoint, "recorded_offsets", lambda spark, loc: {("orders", 0): 20_000, ("other", 0): 85})
    monkeypatch.setattr(app_recreated, "table_exists", lambda spark, table: True)
    tables = {"icetide.raw.orders": _wm(offsets={("orders", 0): 20_000}, topic_ids={"orders": X})}
    monkeypatch.setattr(_Writer, "__init__", _writer_with(tables))
    cfg = load_config(write(tmp_path, {**BASE, "source": {**BASE["source"], "topics": ["orders", "other"]}}))
    writer = _Writer(cfg, {})
    assert app_recreated.at_start(None, cfg, writer, True) is None  # type: ignore[arg-type]
    topics = writer.topics
    assert topics.unverified == {"orders", "other"} and topics.recorded == {"orders": X, "other": X}
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, names: {"orders": Y, "other": X})
    monkeypatch.setattr(recreated.source, "end_offsets", lambda src, tps: {("orders", 0): 30_000, ("other", 0): 90})
    with pytest.raises(TopicRecreatedError, match="topic 'orders'"):
        topics.check_batch(None, "ckpt", 7, {("orders", 0): 20_000, ("other", 0): 85},  # type: ignore[arg-type]
                           {("orders", 0): 30_000, ("other", 0): 90})


def test_kafka_that_stops_telling_ids_is_decided_by_ends_after_a_few_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's second hole: a proxy (or a downgrade) that no longer tells topic ids must not
    block a healthy pipeline for good; an end below a recorded offset still tells a recreation."""
    from icetide.errors import TransientError

    topics = Topics(_config(tmp_path).source, "p")
    kafka = KafkaTopics({}, {"orders": [0]}, {("orders", 0): 500})
    rec = {("orders", 0): 400}
    topics.arm({}, {}, {"orders": X}, recreated.undecided(kafka, {"orders": {X}}, rec, {}), rec)
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, names: {})
    monkeypatch.setattr(recreated.source, "end_offsets", lambda src, tps: {("orders", 0): 500})
    for _ in range(recreated.GIVE_IDS_UP_AFTER - 1):
        with pytest.raises(TransientError, match="did not tell whether topic"):
            topics.check_batch(None, "c", 1, {("orders", 0): 400}, {("orders", 0): 500})  # type: ignore[arg-type]
    topics.check_batch(None, "c", 1, {("orders", 0): 400}, {("orders", 0): 500})  # type: ignore[arg-type]
    assert topics.unverified == set() and topics.pending == {}
    # the same, but the end fell below what was recorded: recreated, whatever the count
    other = Topics(_config(tmp_path).source, "p")
    other.arm({}, {}, {"orders": X}, {"orders"}, rec)
    monkeypatch.setattr(recreated.source, "end_offsets", lambda src, tps: {("orders", 0): 3})
    with pytest.raises(TopicRecreatedError, match="topic 'orders'"):
        other.check_batch(None, "c", 1, {("orders", 0): 400}, {("orders", 0): 450})  # type: ignore[arg-type]


def test_a_batch_whose_offset_log_is_unreadable_writes_nothing_while_a_topic_waits_for_its_check(
        tmp_path: Path) -> None:
    from icetide.errors import TransientError

    topics = Topics(_config(tmp_path).source, "p")
    topics.unreadable(3)  # not armed: nothing to wait for
    topics.arm({}, {}, {"orders": X}, {"orders"}, {("orders", 0): 400})
    with pytest.raises(TransientError, match=r"batch 3: its offset log is not readable.*orders"):
        topics.unreadable(3)
    topics.unverified.clear()
    topics.unreadable(4)


def test_a_run_whose_topic_ids_are_older_than_the_tables_marks_nothing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A run paused since before the recreation reads a table another run already moved to the new
    topic (id Y): its own view says X. Kafka says Y: the query starts again, nothing is set aside."""
    from icetide.errors import TransientError

    src = load_config(write(tmp_path, BASE)).source
    table_now = _wm(topic_ids={"t": Y}, offsets={("t", 0): 1_500})
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, topics: {"t": Y})
    with pytest.raises(TransientError, match="does not confirm"):
        recreated.confirm_stale(src, table_now, {"t": X})
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, topics: {"t": X})  # the run is right
    recreated.confirm_stale(src, table_now, {"t": X})
    monkeypatch.setattr(recreated.source, "topic_ids", lambda src, topics: {})  # Kafka does not tell
    with pytest.raises(TransientError, match="does not confirm"):
        recreated.confirm_stale(src, table_now, {"t": X})

    def down(src: Any, topics: Any) -> dict[str, str]:
        raise RuntimeError("KafkaException: _TRANSPORT: all brokers down")
    monkeypatch.setattr(recreated.source, "topic_ids", down)  # the review: no answer marked with the old id
    with pytest.raises(TransientError, match="all brokers down"):
        recreated.confirm_stale(src, table_now, {"t": X})
    recreated.confirm_stale(src, _wm(topic_ids={}, offsets={("t", 0): 1_500}), {"t": X})  # no id held: no doubt
    recreated.confirm_stale(src, table_now, {"t": None})  # found by offsets, Kafka tells no ids: nothing to ask
