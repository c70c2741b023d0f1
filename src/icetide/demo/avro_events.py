"""The demo's events as Avro in the Confluent wire format: two schema versions (the second adds
``device`` with a default, mid-stream, as a producer upgrade would) registered in the local schema
registry by Confluent's own serializer, and a few bad records of each Avro dead-letter class."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from icetide.demo.events import EVENT_TYPES

V1: dict[str, Any] = {"type": "record", "name": "Event", "namespace": "icetide.demo", "fields": [
    {"name": "id", "type": "string", "doc": "event id"},
    {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "user_id", "type": "long"},
    {"name": "event_type", "type": {"type": "enum", "name": "EventType", "symbols": [t.upper() for t in EVENT_TYPES]}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
]}
V2: dict[str, Any] = {**V1, "fields": [*V1["fields"], {"name": "device", "type": "string", "default": "unknown",
                                                       "doc": "added in version 2"}]}


def bad_values(good: bytes) -> list[tuple[bytes | None, str]]:
    """One record of each wire-format fault, built from a good record's header."""
    header = good[:5]
    return [(b"\x01" + good[1:], "bad_magic_byte"), (b"\x00\x00\x01", "truncated_record"),
            (b"\x00" + (2**31 - 7).to_bytes(4, "big") + b"\x02", "unknown_schema_id"),
            (header + b"\x7f", "undecodable"), (None, "null_value")]


def avro_values(n: int, registry_url: str, topic: str, bad_every: int = 0, version2_after: float = 0.5,
                seed: int = 7) -> Iterator[tuple[bytes | None, str | None]]:
    """Yield ``(value, expected_error_class)``; good events have error class None."""
    from decimal import Decimal

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = (AvroSerializer(client, json.dumps(s)) for s in (V1, V2))
    rng = random.Random(seed)
    now = datetime.now(UTC)
    bad: list[tuple[bytes | None, str]] = []
    for i in range(n):
        newer = i >= n * version2_after
        e: dict[str, Any] = {"id": f"evt-{i:09d}", "event_time": now - timedelta(seconds=rng.randint(0, 3 * 86400)),
                             "user_id": rng.randint(1, 50_000), "event_type": rng.choice(EVENT_TYPES).upper(),
                             "amount": Decimal(f"{rng.uniform(0, 500):.2f}")}
        if newer:
            e["device"] = rng.choice(("ios", "android", "web"))
        value = (v2 if newer else v1)(e, ctx)
        assert value is not None
        if not bad:
            bad = bad_values(bytes(value))
        if bad_every and i % bad_every == bad_every - 1:
            yield bad[(i // bad_every) % len(bad)]
        else:
            yield bytes(value), None
