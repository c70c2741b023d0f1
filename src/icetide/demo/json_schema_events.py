"""The demo's events as JSON Schema values in the Confluent wire format: two schema versions (the
second adds ``device``, mid-stream, as a producer upgrade would) registered in the local schema
registry, the records framed here (magic byte, schema id, the JSON text), and a few bad records of
each JSON Schema dead-letter class (the wire format's, JSON text that does not parse, a record
breaking a rule of its own schema).

Both versions are closed objects (``additionalProperties: false``, as Confluent's generator writes
them): adding an optional property to one is a BACKWARD-compatible change for the registry."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from icetide.demo.events import EVENT_TYPES

V1: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Event", "type": "object",
    "additionalProperties": False, "required": ["id", "event_time", "user_id", "event_type", "amount"],
    "properties": {
        "id": {"type": "string", "description": "event id"},
        "event_time": {"type": "string", "format": "date-time"},
        "user_id": {"type": "integer", "minimum": 1},
        "event_type": {"type": "string", "enum": [t.upper() for t in EVENT_TYPES]},
        "amount": {"type": "number", "minimum": 0},
    },
}
V2: dict[str, Any] = copy.deepcopy(V1)
V2["properties"]["device"] = {"type": "string", "description": "added in version 2"}


def register(url: str, subject: str, schema: dict[str, Any]) -> int:
    """Register the JSON Schema ``schema`` under ``subject``; its id."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    return int(SchemaRegistryClient({"url": url}).register_schema(subject, Schema(json.dumps(schema), "JSON")))


def frame(schema_id: int, value: dict[str, Any] | bytes) -> bytes:
    """The Confluent JSON Schema wire format of ``value`` (an object, or its JSON text)."""
    text = value if isinstance(value, bytes) else json.dumps(value).encode()
    return b"\x00" + schema_id.to_bytes(4, "big") + text


def bad_values(good: bytes) -> list[tuple[bytes | None, str]]:
    """One record of each dead-letter class, built from a good record (its header, its event)."""
    header, event = good[:5], json.loads(good[5:])
    return [(b"\x01" + good[1:], "bad_magic_byte"), (b"\x00\x00\x01", "truncated_record"),
            (b"\x00" + (2**31 - 7).to_bytes(4, "big") + good[5:], "unknown_schema_id"),
            (header + b'{"id": "evt-', "malformed_json"),
            (header + json.dumps(event | {"amount": -1.0}).encode(), "schema_violation"), (None, "null_value")]


def json_schema_values(n: int, registry_url: str, topic: str, bad_every: int = 0, version2_after: float = 0.5,
                       seed: int = 7) -> Iterator[tuple[bytes | None, str | None]]:
    """Yield ``(value, expected_error_class)``; good events have error class None."""
    subject = f"{topic}-value"
    ids = [register(registry_url, subject, schema) for schema in (V1, V2)]
    rng = random.Random(seed)
    now = datetime.now(UTC)
    bad: list[tuple[bytes | None, str]] = []
    for i in range(n):
        newer = i >= n * version2_after
        e: dict[str, Any] = {"id": f"evt-{i:09d}",
                             "event_time": (now - timedelta(seconds=rng.randint(0, 3 * 86400))).isoformat(),
                             "user_id": rng.randint(1, 50_000), "event_type": rng.choice(EVENT_TYPES).upper(),
                             "amount": round(rng.uniform(0, 500), 2)}
        if newer:
            e["device"] = rng.choice(("ios", "android", "web"))
        value = frame(ids[newer], e)
        if not bad:
            bad = bad_values(value)
        if bad_every and i % bad_every == bad_every - 1:
            yield bad[(i // bad_every) % len(bad)]
        else:
            yield value, None
