"""Discovery: the offsets it reads (the head of each partition's range, never past its end), when it runs,
and which of its tables the one pass can settle from kept values."""

from __future__ import annotations

import json

from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from icetide.config.target import TargetTable
from icetide.ingest.discover import head_offsets, may_find
from icetide.ingest.shapes import settles, settles_unseen
from icetide.lake.offsets import BatchRanges


def test_the_heads_are_the_first_records_of_each_partition_with_records_and_end_inside_the_batch() -> None:
    ranges = BatchRanges({("a", 0): (10, 5000), ("a", 1): (7, 9), ("b", 3): (40, 40), ("b", 0): (0, 1200)})
    got = head_offsets(ranges, 1000)
    assert got is not None
    assign, start, end = (json.loads(x) for x in got)
    assert assign == {"a": [0, 1], "b": [0]}  # b[3] holds no record of the batch
    assert start == {"a": {"0": 10, "1": 7}, "b": {"0": 0}}
    assert end == {"a": {"0": 1010, "1": 9}, "b": {"0": 1000}}


def test_no_record_or_no_sample_reads_nothing() -> None:
    assert head_offsets(BatchRanges({("a", 0): (5, 5)}), 1000) is None
    assert head_offsets(BatchRanges({("a", 0): (5, 50)}), 0) is None


def test_a_hostile_topic_name_stays_a_json_string() -> None:
    topic = 'x","y":{"0":-2},"z'
    got = head_offsets(BatchRanges({(topic, 0): (0, 10)}), 5)
    assert got is not None
    assert list(json.loads(got[1])) == [topic] and json.loads(got[2]) == {topic: {"0": 5}}


def _target(**extra: object) -> TargetTable:
    return TargetTable.model_validate({"route": {"by": "field", "name": "kind", "table": "ev.{value}"}, **extra})


def test_discovery_runs_only_when_it_can_name_a_table() -> None:
    assert not may_find(_target(), set())  # nothing exists, nothing declared: every table is inferred
    assert may_find(_target(), {"ev.a"})  # a restart: existing tables
    assert may_find(_target(schema="id STRING"), set())
    assert may_find(_target(tables={"ev.a*": {"schema": "id STRING"}}), set())
    assert may_find(_target(tables={"ev.a*": {"schema_ddl": "id STRING"}}), set())  # the field's own name
    assert not may_find(_target(tables={"ev.a*": {"partition_by": ["bucket(4, id)"], "schema": None}}), set())


def test_a_table_only_values_can_settle_is_left_out_of_the_one_pass_until_its_shapes_are_known() -> None:
    ok = StructType([StructField("id", StringType()), StructField("n", LongType()), StructField("x", DoubleType()),
                     StructField("tags", ArrayType(StringType())),
                     StructField("m", MapType(StringType(), StructType([StructField("v", LongType())])))])
    assert settles_unseen(ok) and settles(ok)
    for bad in (IntegerType(), FloatType(), DecimalType(10, 2)):
        wide = StructType([*ok.fields, StructField("nested", StructType([StructField("deep", ArrayType(bad))]))])
        assert not settles_unseen(wide), bad
        assert settles(wide) == (not isinstance(bad, DecimalType)), bad  # known shapes settle but for decimals
    assert not settles_unseen(StructType([StructField("id", StringType(), nullable=False)]))
