"""Reading Spark's streaming checkpoint: which offsets a micro-batch covers, without scanning it.

Spark writes ``offsets/<batch>`` (the end offsets of each source) before it runs the batch, and the
Kafka source writes its initial offsets to ``sources/0/0``. So in ``foreachBatch`` the batch's
``[start, end)`` per partition is known exactly, for any filesystem Hadoop can reach.

icetide keeps one file of its own there, ``icetide-topics.json``: the Kafka topic id of each topic
whose offsets the checkpoint holds, so a run can tell a topic deleted and created again (#41).
"""

from __future__ import annotations

import json
import time
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


Offsets = dict[TopicPartition, int]


def batch_bounds(spark: SparkSession, location: str, batch_id: int) -> tuple[Offsets, Offsets] | None:
    """The offsets a batch starts from (the previous batch's ends, or the initial offsets) and
    ends at, as Spark planned them; None if the log cannot be read."""
    root = location.rstrip("/")
    end = _kafka_offsets(read_text(spark, f"{root}/offsets/{batch_id}"), 1)
    if end is None:
        return None
    start = _batch_start(spark, root, batch_id)
    return None if start is None else (start, end)


def _batch_start(spark: SparkSession, root: str, batch_id: int) -> Offsets | None:
    if batch_id > 0:
        return _kafka_offsets(read_text(spark, f"{root}/offsets/{batch_id - 1}"), 1)
    return _kafka_offsets(read_text(spark, f"{root}/sources/0/0"), 0)


def ranges_of(start: Offsets, end: Offsets) -> dict[TopicPartition, tuple[int, int]]:
    """``{(topic, partition): (start, end)}`` of the partitions a batch reads records of.

    A partition new in this batch starts at 0 (Spark reads new partitions from the earliest
    offset); that lower bound is safe for every use the ledger makes of it.
    """
    return {tp: (max(0, start.get(tp, 0)), e) for tp, e in end.items() if e > max(0, start.get(tp, 0))}


def batch_offsets(spark: SparkSession, location: str, batch_id: int) -> dict[TopicPartition, tuple[int, int]] | None:
    """``{(topic, partition): (start, end)}`` of a batch, or None if the log cannot be read."""
    bounds = batch_bounds(spark, location, batch_id)
    return None if bounds is None else ranges_of(*bounds)


def _batch_ids(spark: SparkSession, path: str) -> list[int]:
    fs, p = _fs_path(spark, path)
    if not fs.exists(p):
        return []
    return sorted(int(n) for n in (str(s.getPath().getName()) for s in fs.listStatus(p)) if n.isdigit())


def recorded_offsets(spark: SparkSession, location: str) -> Offsets:
    """The highest offset per partition among the newest two batches the checkpoint planned (the
    newest alone may already show offsets gone back, which is how Spark notices a recreated topic)."""
    root = location.rstrip("/")
    out: Offsets = {}
    for b in _batch_ids(spark, f"{root}/offsets")[-2:]:
        for tp, off in (_kafka_offsets(read_text(spark, f"{root}/offsets/{b}"), 1) or {}).items():
            out[tp] = max(out.get(tp, -1), off)
    return out


def resume_position(spark: SparkSession, location: str) -> Offsets:
    """Where Spark would go on from: the ends of the newest committed batch (else its initial offsets)."""
    root = location.rstrip("/")
    done = _batch_ids(spark, f"{root}/commits")
    text = read_text(spark, f"{root}/offsets/{done[-1]}") if done else read_text(spark, f"{root}/sources/0/0")
    offsets = _kafka_offsets(text, 1 if done else 0) or {}
    return {tp: off for tp, off in offsets.items() if off >= 0}


TOPICS_FILE = "icetide-topics.json"


def read_topic_ids(spark: SparkSession, location: str) -> dict[str, str]:
    """The Kafka topic ids recorded with the checkpoint (empty: none, e.g. an older icetide's)."""
    try:
        text = read_text(spark, f"{location.rstrip('/')}/{TOPICS_FILE}")
        return {str(t): str(i) for t, i in json.loads(text).get("topic_ids", {}).items()} if text else {}
    except Exception:  # unreadable (a kill while it was written): the offsets still tell
        return {}


def write_topic_ids(spark: SparkSession, location: str, ids: dict[str, str]) -> None:
    fs, p = _fs_path(spark, f"{location.rstrip('/')}/{TOPICS_FILE}")
    out = fs.create(p, True)
    try:
        out.write(bytearray(json.dumps({"topic_ids": ids}, sort_keys=True).encode()))
    finally:
        out.close()


def set_aside(spark: SparkSession, location: str) -> str:
    """Rename the checkpoint folder to ``<location>.recreated-<UTC time>``; its new name."""
    root = location.rstrip("/")
    target = f"{root}.recreated-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    fs, src = _fs_path(spark, root)
    _, dst = _fs_path(spark, target)
    if not fs.rename(src, dst):
        raise OSError(f"could not rename the checkpoint {root} to {target}")
    return target
