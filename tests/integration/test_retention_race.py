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

    original, cut = retention.RetentionProbe.lost, {0: 150, 1: 60}
    asked: list[Any] = []

    def racing(self: retention.RetentionProbe, ranges: Any, read: Any = None) -> Any:
        answer = original(self, ranges, read)
        if not asked:  # retention runs right after the first batch's probe, before Spark reads
            admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
            for fut in admin.delete_records([TopicPartition(topic, p, o) for p, o in cut.items()]).values():
                fut.result(30)
        asked.append(answer)
        return answer

    monkeypatch.setattr(retention.RetentionProbe, "lost", racing)
    runner = run_in_process(spark, path)

    assert asked[0] == {}, "the first probe ran before the deletion"
    # the records that survived landed, each once, and exactly the deleted ones are reported lost
    offsets = sorted((r[0], r[1]) for r in spark.sql(
        f"SELECT _kafka_partition, _kafka_offset FROM icetide.{table}").collect())
    assert offsets == sorted([(0, o) for o in range(150, 200)] + [(1, o) for o in range(60, 200)])
    c = runner.writer.counters
    assert (c.lost_records, c.gaps) == (210, {f"{topic}[0]": [[0, 150]], f"{topic}[1]": [[0, 60]]})
    assert c.batches >= 1
