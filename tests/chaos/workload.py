"""What a chaos run produces, and what it knows of every record it produced.

Append: JSON records on two topics a pattern matches, routed by ``kind`` to four tables, with
schema drift (a field, then a nested one, appear during the run), producers' ordinary field names
(``user-agent``) and hostile records (not JSON, NaN, invalid UTF-8, a duplicate key, a route that
is no table name). Every record's Kafka key is its own id, so a dead letter names it too; every
delivery is recorded with the topic's incarnation (a recreated topic numbers offsets from 0 again).

CDC: a Debezium JSON change stream (out of order, duplicated, replayed, deletes with Kafka
tombstones and some with a null ``before``) whose final state is computed independently; on the
full stack also the same kind of stream in Debezium's Avro (through the schema registry), with
changes of an unknown operation and records that are not Avro among them.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.fixtures.cdc_stream import ChangeStream, _key, generate

KINDS = ("orders", "clicks", "views", "logins")
BAD = ("not_json", "nan", "invalid_utf8", "duplicate_key", "bad_route")


@dataclass
class Delivered:
    topic: str
    incarnation: int
    partition: int
    offset: int | None  # None: librdkafka confirmed the record without saying where (see checks.census)


@dataclass
class Produced:
    uid: str
    kind: str | None  # the table it routes to; None: a record that must be a dead letter
    bad: str | None = None
    delivered: Delivered | None = None


class AppendWorkload:
    """Produces ``rate`` records a second from a thread until stopped."""

    def __init__(self, bootstrap: str, topics: tuple[str, str], rate: float, seed: int, drift_at: tuple[float, float]
                 ) -> None:
        self.bootstrap, self.topics, self.rate = bootstrap, topics, rate
        self.rng = random.Random(seed)
        self.drift_at = drift_at
        self.records: dict[str, Produced] = {}
        self.incarnation = {t: 0 for t in topics}
        self.failed = 0  # deliveries Kafka refused (not expected anywhere)
        self.errors: Counter[str] = Counter()  # why, by librdkafka's error name
        self.producers = 1  # how many producers the run needed (a fatal error or a recreated topic: a new one)
        self._renew = threading.Event()
        self._stop, self._hold = threading.Event(), threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-append", daemon=True)
        self._seq = 0
        self._t0 = 0.0

    def start(self) -> AppendWorkload:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def hold(self) -> None:
        """Stop producing and wait until everything sent is delivered (or failed)."""
        self._hold.set()
        self._idle.wait(180)

    def release(self, renew: bool = False) -> None:
        """Produce again; ``renew``: with a new producer (after a topic was recreated, the old one's
        idempotence state (sequence numbers per partition) belongs to the deleted topic)."""
        if renew:
            self._renew.set()
        self._idle.clear()
        self._hold.clear()

    def stop(self) -> None:
        self._stop.set()
        self._hold.set()
        self._thread.join(300)

    def _value(self, uid: str, elapsed: float) -> tuple[bytes, str | None, str | None]:
        rng = self.rng
        kind = rng.choice(KINDS)
        if rng.random() < 0.025:
            bad = rng.choice(BAD)
            value = {"not_json": b"{not json " + uid.encode(),
                     "nan": b'{"id":"' + uid.encode() + b'","kind":"orders","amount":NaN}',
                     "invalid_utf8": b'{"id":"' + uid.encode() + b'","kind":"orders","note":"\xff\xfe"}',
                     "duplicate_key": b'{"id":"' + uid.encode() + b'","kind":"orders","n":1,"n":2}',
                     "bad_route": json.dumps({"id": uid, "kind": "no such/table"}).encode()}[bad]
            return value, None, bad
        rec: dict[str, Any] = {"id": uid, "kind": kind, "n": self._seq, "amount": round(rng.uniform(0, 500), 2),
                               "event_time": f"2026-11-29T{int(elapsed // 60) % 24:02d}:{int(elapsed) % 60:02d}:00Z",
                               "user-agent": rng.choice(["curl/8", "Mozilla/5.0", "okhttp"])}
        if elapsed >= self.drift_at[0]:
            rec["device"] = rng.choice(["ios", "android", "web"])
        if elapsed >= self.drift_at[1]:
            rec["geo"] = {"lat": round(rng.uniform(-90, 90), 3), "lon": round(rng.uniform(-180, 180), 3)}
        return json.dumps(rec, separators=(",", ":")).encode(), kind, None

    def _loop(self) -> None:
        from confluent_kafka import KafkaException, Producer

        def producer() -> Any:
            return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "enable.idempotence": True,
                             "message.timeout.ms": 240000, "topic.metadata.refresh.interval.ms": 3000,
                             "log_level": 0})

        p = producer()

        def report(record: Produced, topic: str, incarnation: int) -> Any:
            def on_delivery(err: Any, msg: Any) -> None:
                if err is None:
                    record.delivered = Delivered(topic, incarnation, msg.partition(), msg.offset())
                else:  # not delivered: the checks hold icetide to nothing for it
                    self.failed += 1
                    self.errors[err.name()] += 1
                    if err.fatal():  # an idempotent producer's fatal error fails every later record
                        self._renew.set()
            return on_delivery

        tick = 0.05
        while not self._stop.is_set():
            if self._renew.is_set():
                p.flush(120)
                p = producer()
                self.producers += 1
                self._renew.clear()
            if self._hold.is_set():
                p.flush(120)
                self._idle.set()
                time.sleep(0.1)
                continue
            began = time.monotonic()
            for _ in range(max(1, int(self.rate * tick))):
                self._seq += 1
                uid = f"u{self._seq:08d}"
                value, kind, bad = self._value(uid, began - self._t0)
                topic = self.topics[self._seq % 2]
                record = Produced(uid, kind, bad)
                self.records[uid] = record
                deadline = time.monotonic() + 120
                while True:
                    try:
                        p.produce(topic, value=value, key=uid.encode(),
                                  on_delivery=report(record, topic, self.incarnation[topic]))
                        break
                    except BufferError:
                        p.poll(0.1)
                    except KafkaException as e:  # a topic just created again is unknown here for a moment
                        if e.args and getattr(e.args[0], "fatal", lambda: False)():
                            self._renew.set()
                        if time.monotonic() > deadline or self._renew.is_set():
                            self.failed += 1
                            self.errors[e.args[0].name() if e.args and hasattr(e.args[0], "name") else "produce"] += 1
                            break
                        p.poll(0.5)
            p.poll(0)
            time.sleep(max(0.0, tick - (time.monotonic() - began)))
        p.flush(120)
        self._idle.set()


@dataclass
class CdcWorkload:
    """Sends a generated Debezium change stream over ``spread`` seconds from a thread.

    Every message is sent until Kafka confirms it: a delivery that failed (a broker outage past
    the producer's patience, an idempotent producer's fatal error) is sent again, by a new producer
    after a fatal error. A change sent twice is harmless (the stream already repeats changes); what
    Kafka holds in the end is read back by the checks' census, so a bad change confirmed twice is
    held to two dead letters."""

    bootstrap: str
    topic: str
    stream: ChangeStream
    spread: float
    partitions: int = 2
    sent: int = 0
    resent: int = 0  # messages sent again after a failed delivery
    producers: int = 1
    unconfirmed: int = 0  # messages still not confirmed when the thread gave up (a harness failure)
    errors: Counter[str] = field(default_factory=Counter)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def make(cls, bootstrap: str, topic: str, seed: int, changes: int, spread: float) -> CdcWorkload:
        stream = generate(keys=max(50, changes // 8), changes=changes, seed=seed, debezium=True, bad_every=400,
                          kafka_tombstones=True, null_before_every=9)
        return cls(bootstrap, topic, stream, spread)

    @classmethod
    def make_avro(cls, bootstrap: str, topic: str, seed: int, changes: int, spread: float, registry_url: str,
                  bad_every: int = 400) -> CdcWorkload:
        """Debezium's Avro: every change encoded now (the registry is asked once, before any fault);
        every ``bad_every``-th message is followed by a change of operation ``x`` or by bytes
        that are not Avro (no magic byte), each counted by the dead-letter class it must get."""
        from tests.fixtures.avro import debezium_encoder

        envelope = debezium_encoder(registry_url, topic)
        stream = generate(keys=max(50, changes // 8), changes=changes, seed=seed + 1, debezium=True,
                          kafka_tombstones=True, encoder=envelope)
        messages: list[tuple[int, bytes | None]] = []
        labels: list[int | str] = []
        for i, ((key, value), label) in enumerate(zip(stream.messages, stream.labels, strict=True)):
            messages.append((key, value))
            labels.append(label)
            if value is not None and i % bad_every == bad_every - 1:
                kind = ("unknown_operation", "bad_magic_byte")[(i // bad_every) % 2]
                ch = {"key": key, "op": "x", "version": 10**9 + i, "row": {"id": key, "name": "bad", "balance": 0.0}}
                bad = envelope(ch) if kind == "unknown_operation" else b"\x07not avro " + str(i).encode()
                messages.append((key, bad))
                labels.append(kind)
                stream.bad[kind] = stream.bad.get(kind, 0) + 1
        stream.messages, stream.labels = messages, labels
        return cls(bootstrap, topic, stream, spread)

    def start(self) -> CdcWorkload:
        self._thread = threading.Thread(target=self._loop, name="chaos-cdc", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float = 1200) -> None:
        """Wait until every message is confirmed (or the thread gave up, counted in ``unconfirmed``)."""
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the CDC producer of {self.topic} still runs after {timeout:.0f}s"

    def _loop(self) -> None:
        from confluent_kafka import KafkaException, Producer

        def producer() -> Any:
            return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "enable.idempotence": True,
                             "message.timeout.ms": 240000, "topic.metadata.refresh.interval.ms": 3000,
                             "log_level": 0})

        msgs = self.stream.messages
        failed: list[int] = []  # indexes of messages whose delivery failed: sent again
        pending: set[int] = set()  # sent, not yet confirmed or failed
        renew = threading.Event()

        def report(i: int) -> Any:
            def on_delivery(err: Any, _msg: Any) -> None:
                pending.discard(i)
                if err is not None:
                    self.errors[err.name()] += 1
                    failed.append(i)
                    if err.fatal():  # an idempotent producer's fatal error fails every later record
                        renew.set()
            return on_delivery

        p = producer()

        def send(i: int) -> None:
            key, value = msgs[i]
            while True:
                try:  # keyed like Debezium: one key, one partition
                    p.produce(self.topic, value=value, key=_key(key, True), partition=key % self.partitions,
                              on_delivery=report(i))
                    pending.add(i)
                    return
                except BufferError:
                    p.poll(0.1)
                except KafkaException as e:
                    err = e.args[0] if e.args else None
                    self.errors[getattr(err, "name", lambda: "produce")()] += 1
                    failed.append(i)
                    if getattr(err, "fatal", lambda: False)():
                        renew.set()
                    return

        def settle(wait: float) -> None:
            """Renew the producer after a fatal error; send again what failed."""
            nonlocal p
            p.poll(wait)
            if renew.is_set():
                p.flush(60)  # a fatal producer fails what it still holds at once
                p = producer()
                self.producers += 1
                renew.clear()
            again, failed[:] = list(failed), []
            self.resent += len(again)
            for i in again:
                send(i)

        chunk = max(1, len(msgs) // max(1, int(self.spread * 4)))
        for i in range(0, len(msgs), chunk):
            for j in range(i, min(len(msgs), i + chunk)):
                send(j)
            settle(0)
            self.sent = min(len(msgs), i + chunk)
            time.sleep(0.25)
        deadline = time.monotonic() + 900
        while (pending or failed) and time.monotonic() < deadline:
            p.flush(30)
            settle(0)
        self.unconfirmed = len(pending) + len(failed)
