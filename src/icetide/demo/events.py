"""Sample events and a fast producer (also used by tests and benchmarks)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

EVENT_TYPES = ("view", "click", "add_to_cart", "purchase", "refund")

#: Bad values the demo mixes in: each becomes a dead letter with this error class.
BAD_VALUES: list[tuple[bytes | None, str]] = [
    (b'{"id": "x", "event_time": ', "malformed_json"),
    (b"not json at all", "malformed_json"),
    (b"[1, 2, 3]", "not_a_json_object"),
    (b'{"id": "bad-amount", "event_time": "2026-11-25T10:00:00Z", "amount": "twelve"}', "type_mismatch"),
    (b"", "empty_value"),
    (None, "null_value"),
]


@dataclass(frozen=True)
class Produced:
    good: int
    bad: int
    ids: list[str]


def event(i: int, now: datetime, rng: random.Random, drift: bool, pad: int = 0) -> dict[str, object]:
    e: dict[str, object] = {
        "id": f"evt-{i:09d}",
        "event_time": (now - timedelta(seconds=rng.randint(0, 3 * 86400))).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "user_id": rng.randint(1, 50_000),
        "event_type": rng.choice(EVENT_TYPES),
        "amount": round(rng.uniform(0, 500), 2),
    }
    if drift:  # producers start sending a new field mid-stream
        e["device"] = rng.choice(("ios", "android", "web"))
    if pad:
        e["payload"] = "x" * pad
    return e


def sample_values(n: int, bad_every: int = 0, drift_after: float = 0.5, seed: int = 7,
                  pad: int = 0, first_id: int = 0) -> Iterator[tuple[bytes | None, str | None]]:
    """Yield ``(value, expected_error_class)``; good events have error class None."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    for i in range(n):
        if bad_every and i % bad_every == bad_every - 1:
            yield BAD_VALUES[(i // bad_every) % len(BAD_VALUES)]
        else:
            e = event(first_id + i, now, rng, drift=i >= n * drift_after, pad=pad)
            yield json.dumps(e, separators=(",", ":")).encode(), None


def produce(bootstrap: str, topic: str, values: Iterable[tuple[bytes | None, str | None]],
            partitions: int | None = None) -> Produced:
    """Produce values round-robin over partitions (keys: the event id when present); flush."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 500000, "compression.type": "lz4",
                  "enable.idempotence": True})
    good = bad = 0
    ids: list[str] = []
    for i, (value, err) in enumerate(values):
        kw: dict[str, object] = {}
        if partitions:
            kw["partition"] = i % partitions
        while True:
            try:
                p.produce(topic, value=value, key=str(i).encode(), **kw)  # type: ignore[arg-type]
                break
            except BufferError:
                p.poll(0.1)
        if err is None:
            good += 1
            if value is not None and value[:1] == b"{":
                ids.append(json.loads(value)["id"])
        else:
            bad += 1
        if i % 10000 == 0:
            p.poll(0)
    remaining = p.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} messages were not delivered to {topic}")
    return Produced(good, bad, ids)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for f in futures.values():
        try:
            f.result(30)
        except Exception as e:
            if "already exists" not in str(e).lower() and "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
