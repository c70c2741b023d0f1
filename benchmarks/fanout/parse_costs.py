"""What each per-record step of a fan-out costs, on its own, against vanilla's one parse.

No Kafka and no write (Spark's ``noop`` sink): 250,000 of the fan-out benchmark's JSON events,
cached in 4 partitions, and each step timed 4 times in one warm JVM. It answers how close a
one-pass fan-out (parse each record once under a ``CASE`` on its table) could come to vanilla.

    .venv/bin/python -m benchmarks.fanout.parse_costs [--events 250000] [--tables 20]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent

from benchmarks.fanout.run import events  # noqa: E402
from benchmarks.ingest.run import machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=250_000)
    ap.add_argument("--tables", type=int, default=20)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "parse_costs.md")
    args = ap.parse_args()

    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        BinaryType,
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from icetide.config import load_config
    from icetide.ingest import decode, one_pass_frames, routing, shapes
    from icetide.spark import build_session

    work = Path(tempfile.mkdtemp(prefix="icetide-parse-costs-"))
    (work / "p.yaml").write_text(yaml.safe_dump({
        "name": "parse-costs", "source": {"bootstrap_servers": "127.0.0.1:9", "topics": ["unused"]},
        "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 'c.db'}", "warehouse": str(work / "wh")},
        "target": {"route": {"by": "field", "name": "event_type", "table": "p.{value}"}},
        "spark": {"master": "local[2]", "conf": {"spark.driver.memory": "6g"}},
        "stream": {"checkpoint_location": str(work / "ckpt")}}))
    cfg = load_config(work / "p.yaml")
    spark = build_session(cfg)
    values = events(args.events, args.tables)
    base = (spark.createDataFrame([(v,) for v in values], StructType([StructField("value", BinaryType())]))
            .repartition(4).persist(StorageLevel.MEMORY_AND_DISK_DESER))
    base.count()
    record = StructType([StructField("id", StringType()), StructField("event_time", TimestampType()),
                         StructField("user_id", LongType()), StructField("event_type", StringType()),
                         StructField("amount", DoubleType()), StructField("payload", StringType())])
    text = F.col("value").cast("string")
    route = F.get_json_object(text, "$.event_type")

    def noop(df) -> None:  # type: ignore[no-untyped-def]
        df.write.format("noop").mode("overwrite").save()

    def inference() -> None:
        jvm = spark._jvm
        assert jvm is not None
        strings = getattr(base.select(text)._jdf, "as")(jvm.org.apache.spark.sql.Encoders.STRING())
        spark._jsparkSession.read().json(strings).schema()

    def case_parse() -> None:
        routed = base.withColumn("t", route)
        noop(routed.select("t", *[F.when(F.col("t") == F.lit(f"t{i:02d}"), F.from_json(text, record)).alias(f"c{i}")
                                  for i in range(args.tables)]))

    def sort_and_cache() -> None:
        cached = base.withColumn("t", route).sortWithinPartitions("t").persist(StorageLevel.MEMORY_AND_DISK_DESER)
        cached.count()
        cached.unpersist()

    shape = shapes.column(spark, F.col("value"))
    assert shape is not None, "icetide's JVM classes are missing: run `icetide setup`"

    def one_pass_frame(distinct: bool) -> Callable[[], None]:
        """icetide's one-pass frame (routing, shape, parse, row structs) over Kafka-like rows."""
        kafka_like = base.select(F.lit("bench").alias("topic"), F.lit(0).alias("partition"),
                                 F.lit(0).cast("long").alias("offset"), F.current_timestamp().alias("timestamp"),
                                 F.lit(None).cast("binary").alias("key"), "value")
        routed = routing.with_route(decode.with_kafka_columns(kafka_like), cfg.target, set(), 1_000_000)
        routed = routed.withColumn(shapes.SHAPE, shape)
        meta = [StructField(c, t) for c, t in (("_kafka_topic", StringType()), ("_kafka_partition", IntegerType()),
                                               ("_kafka_offset", LongType()), ("_kafka_timestamp", TimestampType()),
                                               ("_kafka_key", StringType()))]
        targets = []
        for i in range(args.tables):
            schema = StructType([*record.fields, *([StructField(f"x{i}", StringType())] if distinct else [])])
            targets.append(one_pass_frames.Target(f"p.t{i:02d}", schema, StructType([*schema.fields, *meta])))
        frame, _, _ = one_pass_frames.frame(routed, targets, True, 1_000_000)
        return lambda: noop(frame)
    steps: list[tuple[str, Callable[[], None]]] = [
        ("vanilla: from_json with the table schema", lambda: noop(base.select(F.from_json(text, record)))),
        ("routing value (get_json_object)", lambda: noop(base.select(route))),
        ("schema inference (Spark's JSON inference)", inference),
        ("record shape and checks (icetide's JsonScan) and the distinct shapes",
         lambda: base.agg(F.collect_set(shape)).collect()),
        (f"one pass: routing value + {args.tables} from_json under CASE", case_parse),
        ("routing value + sort by table + columnar cache (icetide's two-pass path)", sort_and_cache),
        (f"icetide's one-pass frame: routing, shape, parse; {args.tables} tables of one schema",
         one_pass_frame(False)),
        (f"icetide's one-pass frame: {args.tables} tables of {args.tables} schemas", one_pass_frame(True)),
    ]
    rows = []
    for name, fn in steps:
        times = []
        for _ in range(4):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        warm = min(times[1:])
        rows.append((name, times, warm))
        print(json.dumps({"step": name, "seconds": [round(x, 3) for x in times]}), flush=True)
    spark.stop()
    ref = rows[0][2]
    m = machine()
    lines = [
        "# Fan-out: per-record step costs", "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}; Spark {m['spark']} "
        f"({m['spark_master']}). {args.events:,} events of ~{len(values[0])} B, cached, 4 partitions, "
        "Spark's `noop` sink (no write), one warm JVM; best of runs 2–4. Produced by "
        "`python -m benchmarks.fanout.parse_costs`.", "",
        "| step | runs (s) | best warm (s) | ÷ vanilla parse |", "|---|---|---:|---:|",
        *[f"| {n} | {' / '.join(f'{x:.2f}' for x in ts)} | {w:.2f} | {w / ref:.2f}× |" for n, ts, w in rows],
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
