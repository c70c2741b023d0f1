"""The demo's events as Protobuf in the Confluent wire format: two schema versions (the second adds
``device``, mid-stream, as a producer upgrade would) registered in the local schema registry, the
messages framed here (magic byte, schema id, message indexes, the message) with classes built
from the registered ``.proto`` text, and a few bad records of each Protobuf dead-letter class.

:func:`register`, :func:`message_classes` and :func:`frame` serve the tests' producers too."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from icetide.demo.events import EVENT_TYPES
from icetide.ingest.formats.protobuf_schema import compile_files, main_name
from icetide.ingest.formats.protobuf_types import message_indexes

V1 = """syntax = "proto3";
package icetide.demo;
import "google/protobuf/timestamp.proto";

message Event {
  // event id
  string id = 1;
  google.protobuf.Timestamp event_time = 2;
  int64 user_id = 3;
  EventType event_type = 4;
  double amount = 5;
  //DEVICE
}

enum EventType { VIEW = 0; CLICK = 1; ADD_TO_CART = 2; PURCHASE = 3; REFUND = 4; }
"""
V2 = V1.replace("  //DEVICE\n", "  // added in version 2\n  string device = 6;\n")
V1 = V1.replace("  //DEVICE\n", "")


def register(url: str, subject: str, text: str, refs: list[tuple[str, str, int]] | None = None) -> int:
    """Register ``.proto`` ``text`` under ``subject`` (``refs``: (import name, subject, version)); its id."""
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

    references = [SchemaReference(name, subj, version) for name, subj, version in refs or []]
    return int(SchemaRegistryClient({"url": url}).register_schema(subject, Schema(text, "PROTOBUF", references)))


def message_classes(files: dict[str, str], main: str) -> dict[str, Any]:
    """The message classes of ``files`` (name → ``.proto`` text; ``main`` the one compiled), by full name."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    compiled = compile_files(0, files, main).files.file
    for f in compiled:
        pool.Add(f)
    out: dict[str, Any] = {}
    for f in compiled:
        todo = [f"{f.package}.{m.name}" if f.package else m.name for m in f.message_type]
        while todo:
            d = pool.FindMessageTypeByName(todo.pop())
            out[d.full_name] = message_factory.GetMessageClass(d)
            todo += [n.full_name for n in d.nested_types]
    return out


def frame(schema_id: int, message: Any, indexes: tuple[int, ...] = (0,)) -> bytes:
    """The Confluent Protobuf wire format of ``message`` (a message, or its bytes)."""
    payload = message if isinstance(message, bytes) else message.SerializeToString()
    return b"\x00" + schema_id.to_bytes(4, "big") + message_indexes(indexes) + payload


def bad_values(good: bytes) -> list[tuple[bytes | None, str]]:
    """One record of each wire-format fault, built from a good record's header."""
    header = good[:5]
    return [(b"\x01" + good[1:], "bad_magic_byte"), (b"\x00\x00\x01", "truncated_record"),
            (b"\x00" + (2**31 - 7).to_bytes(4, "big") + b"\x00", "unknown_schema_id"),
            (header + b"\x00\x7f", "undecodable"), (None, "null_value")]


def protobuf_values(n: int, registry_url: str, topic: str, bad_every: int = 0, version2_after: float = 0.5,
                    seed: int = 7) -> Iterator[tuple[bytes | None, str | None]]:
    """Yield ``(value, expected_error_class)``; good events have error class None."""
    subject = f"{topic}-value"
    ids = [register(registry_url, subject, text) for text in (V1, V2)]
    classes = [message_classes({main_name(i): text}, main_name(i))["icetide.demo.Event"]
               for i, text in zip(ids, (V1, V2), strict=True)]
    rng = random.Random(seed)
    now = datetime.now(UTC)
    bad: list[tuple[bytes | None, str]] = []
    for i in range(n):
        newer = i >= n * version2_after
        e = classes[newer](id=f"evt-{i:09d}", user_id=rng.randint(1, 50_000),
                           event_type=rng.choice(EVENT_TYPES).upper(), amount=round(rng.uniform(0, 500), 2))
        e.event_time.FromDatetime(now - timedelta(seconds=rng.randint(0, 3 * 86400)))
        if newer:
            e.device = rng.choice(("ios", "android", "web"))
        value = frame(ids[newer], e)
        if not bad:
            bad = bad_values(value)
        if bad_every and i % bad_every == bad_every - 1:
            yield bad[(i // bad_every) % len(bad)]
        else:
            yield value, None
