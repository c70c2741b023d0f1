"""Record shapes: the JVM fingerprint, and schema inference skipped for batches of known shapes while
drift (new field, new nested field, wider integer) is still caught. Real Kafka, Spark and Iceberg."""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from icetide.app.runner import Runner
from icetide.config import load_config
from icetide.demo.events import create_topic
from icetide.ingest import shapes
from tests.fixtures.records import Background, dumps, send, wait_until
from tests.fixtures.stack import counts, routed_config, unique

BASE = '{"a":1,"b":"x","c":{"d":1.5},"e":[1,2],"f":[{"g":"h"}]}'
SAME = {
    "keys reordered": '{"f":[{"g":"i"}],"e":[3],"c":{"d":2.5},"b":"y","a":2}',
    "longer arrays": '{"a":1,"b":"x","c":{"d":1.5},"e":[1,2,3,4,5],"f":[{"g":"h"},{"g":"j"},{"g":"k"}]}',
    "single quotes (Spark reads them)": "{'a':7,'b':'q','c':{'d':0.5},'e':[9],'f':[{'g':'z'}]}",
    "whitespace": ' { "a" : 1 , "b" : "x" , "c" : { "d" : 1.5 } , "e" : [ 1 ] , "f" : [ { "g" : "h" } ] } ',
}
DIFFERENT = {
    "new top-level field": '{"a":1,"b":"x","c":{"d":1.5},"e":[1],"f":[{"g":"h"}],"n":true}',
    "new nested field": '{"a":1,"b":"x","c":{"d":1.5,"n":1},"e":[1],"f":[{"g":"h"}]}',
    "new field in an array's struct": '{"a":1,"b":"x","c":{"d":1.5},"e":[1],"f":[{"g":"h","n":1}]}',
    "integer beyond 32 bits": '{"a":3000000000,"b":"x","c":{"d":1.5},"e":[1],"f":[{"g":"h"}]}',
    "integer beyond 64 bits": '{"a":30000000000000000000000,"b":"x","c":{"d":1.5},"e":[1],"f":[{"g":"h"}]}',
    "string for a number": '{"a":"1","b":"x","c":{"d":1.5},"e":[1],"f":[{"g":"h"}]}',
    "null for a string": '{"a":1,"b":null,"c":{"d":1.5},"e":[1],"f":[{"g":"h"}]}',
    "empty string (Spark infers it as null)": '{"a":1,"b":"","c":{"d":1.5},"e":[1],"f":[{"g":"h"}]}',
    "fraction in an integer array": '{"a":1,"b":"x","c":{"d":1.5},"e":[1.5],"f":[{"g":"h"}]}',
    "field missing": '{"a":1,"c":{"d":1.5},"e":[1],"f":[{"g":"h"}]}',
    "object moved up a level": '{"a":1,"b":"x","c":{},"d":1.5,"e":[1],"f":[{"g":"h"}]}',
}


def test_json_shape_fingerprint(spark) -> None:  # type: ignore[no-untyped-def]
    values = {"base": BASE, **SAME, **DIFFERENT, "array root": "[1,2]", "number root": "42",
              "empty": "", "malformed": '{"a":', "trailing text": '{"a":1} {"b":2}'}
    df = spark.createDataFrame([(k, v.encode()) for k, v in values.items()],
                               StructType([StructField("k", StringType()), StructField("value", BinaryType())]))
    col = shapes.column(spark, F.col("value"))
    assert col is not None, "icetide's JVM classes are not loaded (icetide setup builds them)"
    got = {r["k"]: r["s"] for r in df.select("k", col.alias("s")).collect()}
    base = got["base"]
    assert base not in (None, shapes.UNKNOWN)
    for name in SAME:
        assert got[name] == base, name
    shapes_seen = [got[name] for name in DIFFERENT]
    for name in DIFFERENT:
        assert got[name] != base, name
    assert len(set(shapes_seen)) == len(shapes_seen), "two different shapes share a fingerprint"
    assert got["array root"] is None and got["number root"] is None and got["empty"] is None
    assert got["malformed"] == shapes.UNKNOWN and got["trailing text"] == shapes.UNKNOWN


def events_of(caplog: Any) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records
            if r.name == "icetide.ingest.sink" and r.getMessage().startswith('{"event": "batch"')]


def test_inference_is_skipped_for_known_shapes_and_drift_still_evolves(kafka, spark, lake, tmp_path,
                                                                      caplog) -> None:  # type: ignore[no-untyped-def]
    ns = unique("shp")
    topic = f"shp-{ns[4:]}"
    create_topic(kafka.bootstrap, topic, 2)
    cfg = load_config(routed_config(kafka, lake, tmp_path, ns, topic))
    caplog.set_level(logging.INFO, logger="icetide")
    caplog.set_level(logging.DEBUG, logger="icetide.ingest.value_checks")
    inferred: list[set[str]] = []  # per batch: the tables its event says were inferred

    def batches() -> int:
        """Once every produced record is in a logged batch event: how many batches there were."""
        def logged() -> bool:
            events = [json.loads(r.getMessage()) for r in caplog.records
                      if r.name == "icetide.ingest.sink" and r.getMessage().startswith('{"event": "batch"')]
            inferred[:] = [{t.split(".")[1] for t in e["inferred"]} for e in events if e["records"]]
            return sum(e["records"] for e in events) == sum(produced.values())
        wait_until(logged, 60, "the batch events")
        return len(inferred)
    rng = random.Random(3)
    now = datetime.now(UTC)
    produced: Counter[str] = Counter()
    seq = iter(range(10**9))

    def records(count: int, kinds: tuple[str, ...], **extra: Any) -> list[bytes]:
        out = []
        for _ in range(count):
            i = next(seq)
            kind = kinds[i % len(kinds)]
            rec: dict[str, Any] = {"id": f"r{i}", "kind": kind, "n": rng.randint(0, 1000),
                                   "ts": (now - timedelta(hours=rng.randint(0, 48))).isoformat(), **extra}
            produced[kind] += 1
            out.append(dumps(rec))
        return out

    def landed() -> bool:
        c = counts(spark, ns)
        return all(c.get(k, 0) == n for k, n in produced.items())

    runner = Runner(cfg, spark=spark)
    with Background(runner):
        send(kafka.bootstrap, topic, records(400, ("orders", "clicks")), 2)
        wait_until(landed, 240, "first rows")
        first = batches()
        assert first >= 1 and {"orders", "clicks"} <= set().union(*inferred)
        # no table exists and none is declared: no discovery read, the usual path infers over every record
        opening = next(e for e in events_of(caplog) if e["records"])
        assert "discover_read" not in opening["timings"] and "admit" in opening["timings"], opening["timings"]
        # the new tables' string fields are strings in every shape: their kinds were not counted record by record
        assert any("strings in every shape" in r.getMessage() and "'kind'" in r.getMessage() for r in caplog.records
                   if r.name == "icetide.ingest.value_checks"), "no new string field was settled by its shapes"
        # the same shapes again: the tables already fit them, no inference
        send(kafka.bootstrap, topic, records(400, ("orders", "clicks")), 2)
        wait_until(landed, 240, "rows of known shapes")
        assert batches() > first
        steady = inferred[first:]
        assert all(not ({"orders", "clicks"} & s) for s in steady), steady
        # drift: a nested field for orders only, and an integer beyond 32 bits for clicks
        mark = batches()
        send(kafka.bootstrap, topic, records(200, ("orders",), meta={"deep": "yes"}), 2)
        send(kafka.bootstrap, topic, records(200, ("clicks",), n=5_000_000_000), 2)
        wait_until(landed, 240, "rows with drift")
        batches()
        assert {"orders", "clicks"} <= set().union(*inferred[mark:])

    assert runner.restarts == 0
    assert counts(spark, ns) == {**dict(produced), "batches": counts(spark, ns)["batches"]}
    assert spark.sql(f"SELECT count(*) FROM icetide.{ns}.orders WHERE meta.deep = 'yes'").first()[0] == 200
    assert spark.sql(f"SELECT count(*) FROM icetide.{ns}.clicks WHERE n = 5000000000").first()[0] == 200
