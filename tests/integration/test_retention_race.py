"""Chaos seed 4327 (#41): Kafka's retention deleted a batch's whole range on one topic after the
batch's probe had asked what was gone and before Spark read it. Spark's reader skips what is gone
(``on_data_loss: continue``), so the records were lost with no report. Now the probe is asked again
right before each commit: the batch is replayed, and its probe reports exactly what is gone.

Deterministic here: the probe's first answer is taken, then the broker deletes records (the real
``DeleteRecords``), as retention would in that window. One in-process run: about 20 s of CI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from icetide.demo.events import create_topic
from tests.fixtures.records import send
from tests.fixtures.stack import pipeline_dict, run_in_process, unique


def _events(n: int) -> list[bytes]:
    return [json.dumps({"id": f"e{i}", "event_time": "2026-11-28T10:00:00Z", "user_id": i,
                        "event_type": "view", "amount": 1.0}).encode() for i in range(n)]


def test_chaos_4327_retention_racing_the_read_of_a_batch_is_replayed_and_reported(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path: Path, monkeypatch) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from icetide.ingest import retention

    topic, table = unique("race"), f"it.{unique('race')}"
    create_topic(kafka.bootstrap, topic, 2)
    send(kafka.bootstrap, topic, _events(400), 2)  # round robin: 200 a partition
    path = tmp_path / "race.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict(kafka, lake, tmp_path, topic, table)))

    original, cut = retention.RetentionProbe.ask, {0: 150, 1: 60}
    asked: list[Any] = []

    def racing(self: retention.RetentionProbe, ranges: Any, read: Any = None) -> Any:
        answer = original(self, ranges, read)
        if not asked:  # retention runs right after the first batch's probe, before Spark reads
            admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
            for fut in admin.delete_records([TopicPartition(topic, p, o) for p, o in cut.items()]).values():
                fut.result(30)
        asked.append(answer)
        return answer

    monkeypatch.setattr(retention.RetentionProbe, "ask", racing)
    runner = run_in_process(spark, path)

    assert asked[0] == {}, "the first probe ran before the deletion"
    # the records that survived landed, each once, and exactly the deleted ones are reported lost
    offsets = sorted((r[0], r[1]) for r in spark.sql(
        f"SELECT _kafka_partition, _kafka_offset FROM icetide.{table}").collect())
    assert offsets == sorted([(0, o) for o in range(150, 200)] + [(1, o) for o in range(60, 200)])
    c = runner.writer.counters
    assert (c.lost_records, c.gaps) == (210, {f"{topic}[0]": [[0, 150]], f"{topic}[1]": [[0, 60]]})
    assert c.batches >= 1


def test_chaos_1404_records_spark_fetched_before_kafka_deleted_them_land_and_no_gap_is_reported(  # type: ignore[no-untyped-def]
        kafka, spark, lake, tmp_path: Path, monkeypatch) -> None:
    """Chaos seed 1404: Spark's Kafka reader keeps the records it fetched past a batch's end for the
    next batch (its fetched-data cache). Kafka deleted them; the next batch's probe reported them
    lost and its read returned them: 93 records landed inside a reported gap. A gap is now what
    Kafka deleted and the read did not return. Here: batch 0 reads 20 of each partition's 200
    records, its reader fetches all 200; Kafka then deletes all 400 before batch 1's probe; every
    record lands from the reader's cache and no gap is reported. One in-process run: about 25 s of CI."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from icetide.ingest import retention

    topic, table = unique("fetched"), f"it.{unique('fetched')}"
    create_topic(kafka.bootstrap, topic, 2)
    send(kafka.bootstrap, topic, _events(400), 2)  # round robin: 200 a partition
    cfg = pipeline_dict(kafka, lake, tmp_path, topic, table)
    cfg["source"]["max_offsets_per_trigger"] = 40
    cfg["stream"]["trigger_interval"] = "0 seconds"
    path = tmp_path / "fetched.yaml"
    path.write_text(yaml.safe_dump(cfg))

    original, asked, deleted = retention.RetentionProbe.ask, [], []

    def deleting(self: retention.RetentionProbe, ranges: Any, read: Any = None) -> Any:
        if not deleted and any(start >= 20 for start, _ in ranges.ranges.values()):  # batch 1's probe
            admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
            for fut in admin.delete_records([TopicPartition(topic, p, 200) for p in (0, 1)]).values():
                fut.result(30)
            deleted.append(True)
        answer = original(self, ranges, read)
        asked.append(answer)
        return answer

    monkeypatch.setattr(retention.RetentionProbe, "ask", deleting)
    runner = run_in_process(spark, path)

    assert deleted and any(asked), "the probe found records Kafka deleted"
    offsets = sorted((r[0], r[1]) for r in spark.sql(
        f"SELECT _kafka_partition, _kafka_offset FROM icetide.{table}").collect())
    assert offsets == [(p, o) for p in (0, 1) for o in range(200)], "every record lands once"
    c = runner.writer.counters
    assert (c.lost_records, c.gaps) == (0, {}), "no gap over records that landed"
