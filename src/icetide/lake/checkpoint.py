"""Reading Spark's streaming checkpoint: which offsets a micro-batch covers, without scanning it.

Spark writes ``offsets/<batch>`` (the end offsets of each source) before it runs the batch, and the
Kafka source writes its initial offsets to ``sources/0/0``. So in ``foreachBatch`` the batch's
``[start, end)`` per partition is known exactly, for any filesystem Hadoop can reach.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from icetide.lake.offsets import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _fs_path(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm = spark._jvm
    assert jvm is not None
    p = jvm.org.apache.hadoop.fs.Path(path)
    return p.getFileSystem(spark._jsc.hadoopConfiguration()), p  # type: ignore[union-attr]


def exists(spark: SparkSession, location: str) -> bool:
    """True if Spark has written offsets there."""
    fs, p = _fs_path(spark, location.rstrip("/") + "/offsets")
    return bool(fs.exists(p)) and len(fs.listStatus(p)) > 0


def read_text(spark: SparkSession, path: str) -> str | None:
    fs, p = _fs_path(spark, path)
    if not fs.exists(p):
        return None
    stream = fs.open(p)
    try:
        jvm = spark._jvm
        assert jvm is not None
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def _kafka_offsets(text: str | None, line: int) -> dict[TopicPartition, int] | None:
    """Parse a Kafka source offset JSON (``{"topic": {"0": 42}}``) from an offset-log file."""
    if text is None:
        return None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    objects = [ln.strip().lstrip("\x00") for ln in lines if ln.strip().lstrip("\x00").startswith("{")]
    if len(objects) <= line:
        return None
    raw = json.loads(objects[line])
    return {(t, int(p)): int(o) for t, parts in raw.items() for p, o in parts.items()}


def batch_time_ms(spark: SparkSession, location: str, batch_id: int) -> int | None:
    """When Spark planned the batch (``batchTimestampMs`` of its offset-log entry)."""
    text = read_text(spark, f"{location.rstrip('/')}/offsets/{batch_id}")
    if text is None:
        return None
    meta = next((ln for ln in text.splitlines() if ln.startswith("{")), None)
    return int(json.loads(meta).get("batchTimestampMs", 0)) if meta else None


def batch_offsets(spark: SparkSession, location: str, batch_id: int) -> dict[TopicPartition, tuple[int, int]] | None:
    """``{(topic, partition): (start, end)}`` of a batch, or None if the log cannot be read.

    A partition new in this batch starts at 0 (Spark reads new partitions from the earliest
    offset); that lower bound is safe for every use the ledger makes of it.
    """
    root = location.rstrip("/")
    end = _kafka_offsets(read_text(spark, f"{root}/offsets/{batch_id}"), 1)
    if end is None:
        return None
    if batch_id > 0:
        start = _kafka_offsets(read_text(spark, f"{root}/offsets/{batch_id - 1}"), 1)
    else:
        start = _kafka_offsets(read_text(spark, f"{root}/sources/0/0"), 0)
    if start is None:
        return None
    return {tp: (max(0, start.get(tp, 0)), e) for tp, e in end.items() if e > max(0, start.get(tp, 0))}
