"""The offsets discovery reads: the head of each partition's range of the batch, never past its end."""

from __future__ import annotations

import json

from icetide.ingest.discover import head_offsets
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
