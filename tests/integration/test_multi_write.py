"""icetide's JVM classes on the real stack: many tables' appends in one Spark job, and the local
file system without forked chmod and .crc files."""

from __future__ import annotations

import os
import stat
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType, TimestampType

from icetide.ingest import multi_write
from icetide.spark.session import LOCAL_FS
from tests.fixtures.stack import unique

ROW = StructType([StructField("id", StringType()), StructField("ts", TimestampType()), StructField("n", LongType())])


def _rows(spark, table: str, count: int, bad_every: int):  # type: ignore[no-untyped-def]
    """``count`` rows for ``table`` over 3 days; every ``bad_every``-th one flagged bad."""
    start = datetime(2026, 11, 1)
    data = [(f"{table}-{i}", start + timedelta(hours=7 * i % 72), i, i % bad_every != 0) for i in range(count)]
    schema = StructType([*ROW.fields, StructField("good", BooleanType())])
    df = spark.createDataFrame(data, schema).repartition(3).cache()  # as a micro-batch is: cached, no shuffle left
    df.count()
    return df, data


def test_many_tables_in_one_spark_job_each_committed_on_its_own(spark) -> None:  # type: ignore[no-untyped-def]
    assert multi_write.available(spark)
    ns = unique("mtw")
    spark.sql(f"CREATE NAMESPACE icetide.{ns}")
    spark.sql(f"CREATE TABLE icetide.{ns}.a (id STRING, ts TIMESTAMP, n BIGINT) USING iceberg "
              "PARTITIONED BY (days(ts)) TBLPROPERTIES ('write.spark.fanout.enabled'='true', "
              "'write.distribution-mode'='none')")
    spark.sql(f"CREATE TABLE icetide.{ns}.b (id STRING, ts TIMESTAMP, n BIGINT) USING iceberg "
              "TBLPROPERTIES ('write.distribution-mode'='none')")
    spark.sql(f"CREATE TABLE icetide.{ns}.c (id STRING, ts TIMESTAMP, n BIGINT) USING iceberg "
              "PARTITIONED BY (days(ts)) TBLPROPERTIES ('write.distribution-mode'='hash')")
    spark.sql(f"CREATE TABLE icetide.{ns}.d (id STRING NOT NULL, ts TIMESTAMP, n BIGINT) USING iceberg "
              "TBLPROPERTIES ('write.distribution-mode'='none')")

    job = multi_write.MultiTableWrite(spark)
    expected = {}
    reasons = {}
    for name, count, bad_every in [("a", 3000, 7), ("b", 1000, 10), ("c", 100, 5), ("d", 100, 5)]:
        df, data = _rows(spark, name, count, bad_every)
        expected[name] = data
        frame = multi_write.frame(df, F.col("good"), F.unix_millis("ts"),
                                  {f.name: F.col(f.name) for f in ROW.fields}, ROW)
        reasons[name] = job.add("icetide", f"{ns}.{name}", frame, {"test-batch": name})
    assert reasons["a"] is None and reasons["b"] is None
    assert reasons["c"] is not None and "distribution" in reasons["c"]
    assert reasons["d"] is not None and "id" in reasons["d"]  # a required column: Spark's own path checks it

    group = f"mtw-{uuid.uuid4().hex[:8]}"
    sc = spark.sparkContext
    sc.setJobGroup(group, "multi-table write test")
    try:
        job.run()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert len(sc.statusTracker().getJobIdsForGroup(group)) == 1, "the tables were not written in one job"

    for name in ("a", "b"):
        w = job.written(f"{ns}.{name}")
        good = [r for r in expected[name] if r[3]]
        assert (w.good, w.bad) == (len(good), len(expected[name]) - len(good))
        assert w.ts_max == int(max(r[1] for r in expected[name]).timestamp() * 1000)
    # nothing is visible before the commit
    assert spark.sql(f"SELECT count(*) FROM icetide.{ns}.a.snapshots").first()[0] == 0

    job.commit(f"{ns}.a")
    job.abort(f"{ns}.b")
    with pytest.raises(Exception, match="not ready to commit"):
        job.commit(f"{ns}.a")

    got = sorted(r[0] for r in spark.sql(f"SELECT id FROM icetide.{ns}.a").collect())
    assert got == sorted(r[0] for r in expected["a"] if r[3])
    same = spark.sql(f"SELECT count(*) FROM icetide.{ns}.a a JOIN (SELECT * FROM VALUES "
                     + ",".join(f"('{r[0]}', {r[2]})" for r in expected["a"][:50])
                     + ") v(id, n) ON a.id = v.id AND a.n = v.n").first()[0]
    assert same == len([r for r in expected["a"][:50] if r[3]])
    snaps = spark.sql(f"SELECT summary FROM icetide.{ns}.a.snapshots").collect()
    assert len(snaps) == 1 and snaps[0][0]["test-batch"] == "a"
    parts = spark.sql(f"SELECT count(*) FROM icetide.{ns}.a.partitions").first()[0]
    assert parts == 3  # partitioned by day as the table says, by Iceberg's own writer
    assert spark.sql(f"SELECT count(*) FROM icetide.{ns}.b.snapshots").first()[0] == 0
    assert spark.table(f"icetide.{ns}.b").count() == 0


def test_local_warehouse_files_without_crc_sidecars_and_with_set_permissions(spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = spark._jsc.hadoopConfiguration()
    assert conf.get("fs.file.impl") == LOCAL_FS
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    assert fs.getClass().getName() == LOCAL_FS

    path = tmp_path / "perm.txt"
    out = fs.create(jvm.org.apache.hadoop.fs.Path(f"file://{path}"), True)
    out.write(b"x")
    out.close()
    fs.setPermission(jvm.org.apache.hadoop.fs.Path(f"file://{path}"),
                     jvm.org.apache.hadoop.fs.permission.FsPermission("640"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert not list(tmp_path.glob(".*.crc"))

    ns = unique("fs")
    spark.sql(f"CREATE NAMESPACE icetide.{ns}")
    spark.sql(f"CREATE TABLE icetide.{ns}.t (id BIGINT) USING iceberg")
    spark.range(100).writeTo(f"icetide.{ns}.t").append()
    assert spark.table(f"icetide.{ns}.t").count() == 100
    files = list(Path(lake / "warehouse" / ns / "t").rglob("*"))
    assert any(f.suffix == ".parquet" for f in files) and any(f.name.endswith(".metadata.json") for f in files)
    assert not [f for f in files if f.name.endswith(".crc")], "checksum sidecars were written"


def test_rows_handed_to_the_writers_are_views_of_the_frame(spark) -> None:  # type: ignore[no-untyped-def]
    """Both routed modes hand each writer a view of the frame's row, no copy (#39): ``runDecoded`` a JSON
    value decoded in the task, laid out with frame columns and a column no record has (null: Iceberg's
    Parquet writer reads it with ``get``, never ``isNullAt``; a view that answered only ``isNullAt``
    read out of bounds and crashed the JVM); ``runRouted`` two tables' columns side by side, checked by
    type against each table before any task runs. ~10 s."""
    from icetide.ingest import names

    ns = unique("mtv")
    spark.sql(f"CREATE NAMESPACE icetide.{ns}")
    props = "TBLPROPERTIES ('write.distribution-mode'='none')"
    spark.sql(f"CREATE TABLE icetide.{ns}.x (id STRING, n BIGINT, extra BIGINT, note STRING, _kafka_partition INT) "
              f"USING iceberg {props}")
    spark.sql(f"CREATE TABLE icetide.{ns}.y (k STRING, v DOUBLE) USING iceberg {props}")
    x_row = spark.table(f"icetide.{ns}.x").schema

    values = [(f'{{"id":"r{i}","n":{i}}}' if i % 5 else '{"id":').encode() for i in range(200)]
    frame = spark.createDataFrame([(None, 1000 + i, v, i % 3) for i, v in enumerate(values)],
                                  "idx INT, ts BIGINT, value BINARY, _kafka_partition INT").repartition(2)
    record = StructType([StructField("id", StringType()), StructField("n", LongType())])
    job = multi_write.MultiTableWrite(spark)
    assert job.add_target("icetide", f"{ns}.x", x_row, {}) is None
    frame = frame.withColumn("idx", F.lit(0))
    decoding = multi_write.Decoding([0], [record.json()], [0, 1, multi_write.NULL, multi_write.NULL, -1 - 3], "UTC",
                                    64, 1000, names.RESERVED_PREFIXES, 1 << 20, 100, False)
    job.run_decoded(frame, [f"{ns}.x"], decoding)
    assert (job.written(f"{ns}.x").good, job.written(f"{ns}.x").bad) == (160, 40)
    job.commit(f"{ns}.x")
    got = sorted(tuple(r) for r in spark.table(f"icetide.{ns}.x").collect())
    assert got == sorted((f"r{i}", i, None, None, i % 3) for i in range(200) if i % 5)

    # runRouted: x's and y's columns side by side, from column 4; a row of x, then of y
    routed = spark.createDataFrame(
        [(i % 2, True, 1000 + i, 1, f"r{i}", i, None, "n", 7, f"k{i}", i / 2) for i in range(100)],
        "idx INT, good BOOLEAN, ts BIGINT, shape BIGINT, id STRING, n BIGINT, extra BIGINT, note STRING, "
        "p INT, k STRING, v DOUBLE").repartition(2)
    y_row = spark.table(f"icetide.{ns}.y").schema
    wrong = multi_write.MultiTableWrite(spark)
    assert wrong.add_target("icetide", f"{ns}.x", x_row, {}) is None
    assert wrong.add_target("icetide", f"{ns}.y", y_row, {}) is None
    with pytest.raises(Exception, match=r"frame column 8 is int, but .*\.y's column k is string"):
        wrong.run_routed(routed, [f"{ns}.x", f"{ns}.y"], [4, 8], 100)  # y from column 8: off by one
    job = multi_write.MultiTableWrite(spark)
    assert job.add_target("icetide", f"{ns}.x", x_row, {}) is None
    assert job.add_target("icetide", f"{ns}.y", y_row, {}) is None
    job.run_routed(routed, [f"{ns}.x", f"{ns}.y"], [4, 9], 100)
    job.commit(f"{ns}.x")
    job.commit(f"{ns}.y")
    got = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM icetide.{ns}.x WHERE note = 'n'").collect())
    assert got == sorted((f"r{i}", i, None, "n", 7) for i in range(0, 100, 2))
    assert sorted(tuple(r) for r in spark.table(f"icetide.{ns}.y").collect()) == sorted(
        (f"k{i}", i / 2) for i in range(1, 100, 2))
