"""One job, many tables: routing by field, tables created on first sight, schema evolution mid-stream,
a topic created while the job runs. Real Kafka, Spark and Iceberg; the job never restarts."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from icetide.app.runner import Runner
from icetide.config import load_config
from icetide.demo.events import create_topic
from tests.fixtures.records import Background, dumps, send, wait_until
from tests.fixtures.stack import counts, routed_config, unique

KINDS = ("orders", "clicks", "views", "users", "carts", "refunds")


def test_fan_out_creates_tables_evolves_schemas_and_picks_up_new_topics(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns = unique("rt")
    prefix = f"rt-{ns[3:]}-"
    topics = [prefix + s for s in ("a", "b", "c")]
    for t in topics[:2]:
        create_topic(kafka.bootstrap, t, 2)
    cfg_path = routed_config(
        kafka, lake, tmp_path, ns, prefix.replace("-", "\\-") + ".*",
        tables={f"{ns}.orders": {"schema": "id STRING, kind STRING, n INT, ts TIMESTAMP",
                                 "partition_by": ["days(ts)"]},
                f"{ns}.clicks": {"partition_by": ["days(ts)"], "sort_by": ["id"]}},
    )
    cfg = load_config(cfg_path)
    cfg.source.options["metadata.max.age.ms"] = "1000"
    rng = random.Random(11)
    now = datetime.now(UTC)
    produced: Counter[str] = Counter()
    ids: dict[str, set[str]] = {k: set() for k in KINDS}
    seq = iter(range(10**9))

    def batch(count: int, **extra: Any) -> list[bytes]:
        out = []
        for _ in range(count):
            i = next(seq)
            kind = KINDS[i % len(KINDS)]
            rec: dict[str, Any] = {"id": f"r{i}", "kind": kind, "n": rng.randint(0, 1000),
                                   "ts": (now - timedelta(hours=rng.randint(0, 48))).isoformat()}
            rec.update({k: (v(i) if callable(v) else v) for k, v in extra.items()})
            produced[kind] += 1
            ids[kind].add(rec["id"])
            out.append(dumps(rec))
        return out

    def landed() -> bool:
        c = counts(spark, ns)
        return all(c.get(k, 0) == produced[k] for k in KINDS)

    runner = Runner(cfg, spark=spark)
    with Background(runner):
        # 1. two topics, six kinds: six tables created on first sight
        send(kafka.bootstrap, topics[0], batch(1200), 2)
        send(kafka.bootstrap, topics[1], batch(1200), 2)
        wait_until(landed, 240, "phase 1 rows")
        phase1 = dict(produced)
        # 2. producers add a top-level field
        send(kafka.bootstrap, topics[0], batch(600, extra=lambda i: f"x{i}"), 2)
        # 3. a topic created while the job runs; records gain a nested field, then a nested sub-field
        create_topic(kafka.bootstrap, topics[2], 1)
        send(kafka.bootstrap, topics[2], batch(600, meta={"a": 1}), 1)
        wait_until(landed, 240, "phase 2-3 rows (new topic picked up)")
        send(kafka.bootstrap, topics[2], batch(600, meta={"a": 2, "b": "deep"}), 1)
        # 4. an int column starts receiving values beyond 32 bits
        send(kafka.bootstrap, topics[1], batch(600, n=lambda i: 3_000_000_000 + i), 2)
        wait_until(landed, 240, "phase 4 rows")

    assert runner.restarts == 0, "the job restarted"
    c = counts(spark, ns)
    assert {k: c[k] for k in KINDS} == dict(produced)
    assert set(c) == {*KINDS, "batches"}  # no bad record, so no dead-letter table either
    for k in KINDS:
        got = [r[0] for r in spark.sql(f"SELECT id FROM icetide.{ns}.{k}").collect()]
        assert len(got) == len(set(got)) and set(got) == ids[k], k
        t = f"icetide.{ns}.{k}"
        # old rows read NULL for the new columns
        assert spark.sql(f"SELECT count(*) FROM {t} WHERE extra IS NULL").first()[0] == produced[k] - 100
        assert spark.sql(f"SELECT count(*) FROM {t} WHERE meta.b = 'deep'").first()[0] == 100
        assert spark.sql(f"SELECT count(*) FROM {t} WHERE meta.a IS NOT NULL AND meta.b IS NULL").first()[0] == 100
        assert spark.sql(f"SELECT count(*) FROM {t} WHERE meta IS NULL").first()[0] == produced[k] - 200
    assert phase1 == {k: 400 for k in KINDS}
    orders = spark.table(f"icetide.{ns}.orders").schema
    assert orders["n"].dataType.simpleString() == "bigint"
    assert spark.sql(f"SELECT max(n) FROM icetide.{ns}.orders").first()[0] >= 3_000_000_000
    # per-table creation policy applied
    assert spark.sql(f"SELECT count(*) FROM icetide.{ns}.clicks.partitions").first()[0] >= 2
    assert spark.sql(f"SELECT count(DISTINCT _kafka_topic) FROM icetide.{ns}.views").first()[0] == 3
    # the evolutions are kept per batch
    evolved = {e for r in spark.sql(f"SELECT evolutions FROM icetide.{ns}.batches").collect() for e in r[0]}
    assert {"add extra string", "add meta struct<a:bigint>", "add meta.b string",
            "widen n int->bigint"} <= evolved, evolved
    created = {r[0] for r in spark.sql(f"SELECT table_name FROM icetide.{ns}.batches WHERE created").collect()}
    assert created == {f"{ns}.{k}" for k in KINDS}
