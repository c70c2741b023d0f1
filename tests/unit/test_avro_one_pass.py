"""The Avro one pass's view of learned schema ids (#39 item 2), without a JVM: an id the registry
did not know whose retry is due is not taken as unknown by the pass, and the batch's own listing
cannot learn an id the pass's columns took as unknown (the pass's clock is the batch's)."""

from __future__ import annotations

import json

import pytest

from icetide.config.registry import SchemaRegistry
from icetide.ingest.formats.avro import AvroFormat, Decoding
from icetide.ingest.formats.avro_types import parse
from icetide.ingest.formats.wire import UNKNOWN_RETRY_S

pytestmark = pytest.mark.unit
SCHEMA = {"type": "record", "name": "Ev", "namespace": "t", "fields": [{"name": "id", "type": "long"}]}


def _format(now: list[float]) -> tuple[AvroFormat, list[int]]:
    fmt = AvroFormat(SchemaRegistry(url="http://127.0.0.1:9"), clock=lambda: now[0])
    fmt.decodings[7] = Decoding(parse(7, json.dumps(SCHEMA)))
    fmt.unknown[9] = 0.0  # the registry answered 404 for id 9 at t=0
    asked: list[int] = []

    def writers(sid: int) -> tuple[list[object], bool]:
        asked.append(sid)
        return [parse(sid, json.dumps(SCHEMA))], False

    fmt._writers = writers  # type: ignore[method-assign,assignment]
    return fmt, asked


def test_an_unknown_id_is_the_passs_unknown_only_while_its_404_is_believed() -> None:
    now = [UNKNOWN_RETRY_S - 1]
    fmt, _ = _format(now)
    assert fmt.expect_known() and fmt.batch_ids == [7, 9]  # 9: a verdict (unknown_schema_id)
    now[0] = UNKNOWN_RETRY_S + 1
    assert fmt.expect_known() and fmt.batch_ids == [7]  # due: not learned, its table is left to the usual path


def test_the_batchs_listing_asks_with_the_passs_clock() -> None:
    now = [UNKNOWN_RETRY_S - 1]
    fmt, asked = _format(now)
    fmt.expect_known()  # the pass took 9 as unknown (its records: no table, the table committed)
    now[0] = UNKNOWN_RETRY_S + 5  # the pass took seconds: the retry is due by the clock now
    fmt.learn([7, 9], lambda w: None)
    assert asked == [] and 9 not in fmt.decodings  # not asked in this batch: it would route into a committed table
    fmt.learn([7, 9], lambda w: None)  # the next batch asks again
    assert asked == [9] and 9 in fmt.decodings
