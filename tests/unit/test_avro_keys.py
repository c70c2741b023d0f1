"""Avro keys' registry answers (#40 item 6, the review's finding on keys): a 404 is believed for a
bounded time, then asked again; the verdict names only the batch's ids. No JVM."""

from __future__ import annotations

from typing import Any

from icetide.ingest.formats.avro_keys import Keys
from icetide.ingest.formats.registry import UnknownSchemaId
from icetide.ingest.formats.wire import UNKNOWN_RETRY_S

KEY = '{"type":"record","name":"K","fields":[{"name":"id","type":"long"}]}'


class Registry:
    """Answers ids in ``have``; 404 for the rest; counts what it was asked."""

    def __init__(self, have: dict[int, str]) -> None:
        self.have, self.asked = have, []  # type: dict[int, str], list[int]

    def schema(self, sid: int) -> dict[str, Any]:
        self.asked.append(sid)
        if sid not in self.have:
            raise UnknownSchemaId(sid)
        return {"schema": self.have[sid]}


def test_a_404_for_a_key_schema_is_asked_again_after_a_while_and_then_decodes() -> None:
    reg, keys = Registry({}), Keys()
    keys.learn(reg, [7], now=100.0)  # type: ignore[arg-type]
    assert keys.refusals() == [(7, "key schema id 7 is not in the schema registry (HTTP 404)")]
    keys.learn(reg, [7], now=100.0 + UNKNOWN_RETRY_S - 1)  # type: ignore[arg-type]
    assert reg.asked == [7]  # believed for a while: not asked batch after batch
    reg.have[7] = KEY  # a follower registry caught up
    keys.learn(reg, [7], now=100.0 + UNKNOWN_RETRY_S)  # type: ignore[arg-type]
    assert reg.asked == [7, 7] and 7 in keys.schemas and keys.refusals() == []


def test_ids_that_only_look_like_the_wire_format_never_grow_the_verdict() -> None:
    reg, keys = Registry({1: KEY}), Keys()
    for batch in range(50):  # every batch, new bogus ids (raw UUID keys starting with 0x00)
        keys.learn(reg, [1, 1000 + 2 * batch, 1001 + 2 * batch], now=float(batch))  # type: ignore[arg-type]
        assert [i for i, _ in keys.refusals()] == [1000 + 2 * batch, 1001 + 2 * batch]
    assert keys.unknown == {}  # a 404 is no refusal for the run


def test_a_top_level_unions_members_give_columns_in_the_writers_order() -> None:
    """The review's finding: member ids are negative, so sorting them as numbers reversed the members."""
    from icetide.ingest.formats.avro import member_id, writer_order

    ids = [member_id(3, 1), 2, member_id(3, 0), member_id(1, 2), 5]
    assert sorted(ids, key=writer_order) == [member_id(1, 2), 2, member_id(3, 0), member_id(3, 1), 5]
