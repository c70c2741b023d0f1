"""The load of the steady benchmark: a compressed day of events and a CDC change stream, produced at
a fixed rate, each message to both arms' topics (so the arms ingest identical data)."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from confluent_kafka import Producer

BASE = datetime(2026, 6, 1)
EVENT_TYPES = ("view", "click", "cart", "order", "refund")
APPEND_FAMILIES = ("day", "hour")
ARMS = ("plain", "ice")


@dataclass
class Load:
    """Produces until stopped. ``compression`` event-seconds pass per wall second."""

    bootstrap: str
    rate: int  # append events/s (each to the day and hour topics of both arms)
    cdc_rate: int  # CDC changes/s (to both arms' CDC topics)
    keys: int
    compression: float
    seed: int
    produced: int = 0
    changes: int = 0
    started: float = 0.0
    ids: list[str] = field(default_factory=list)  # a sample of produced ids, for point lookups
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def event_time(self, at: float | None = None) -> datetime:
        return BASE + timedelta(seconds=((at or time.time()) - self.started) * self.compression)

    def start(self) -> Load:
        self.started = time.time()
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)

    def _run(self) -> None:
        rng = random.Random(self.seed)
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 50, "log_level": 0,
                      "queue.buffering.max.messages": 1_000_000})
        deleted: set[int] = set()
        version = 0
        tick = 0
        while not self._stop.is_set():
            t = time.time()
            for _ in range(self.rate // 10):
                eid = f"e{self.produced:010d}"
                value = json.dumps({"id": eid, "event_time": self.event_time(t).isoformat() + "Z",
                                    "user_id": rng.randrange(100_000), "event_type": rng.choice(EVENT_TYPES),
                                    "amount": round(rng.random() * 100, 2)}).encode()
                for fam in APPEND_FAMILIES:
                    for arm in ARMS:
                        p.produce(f"{fam}_{arm}", value=value)
                if self.produced % 997 == 0:
                    self.ids.append(eid)
                self.produced += 1
            for _ in range(self.cdc_rate // 10):
                key = rng.randrange(self.keys)
                version += 1
                if key in deleted:
                    op = "c"
                    deleted.discard(key)
                elif rng.random() < 0.1:
                    op = "d"
                    deleted.add(key)
                else:
                    op = "u"
                value = json.dumps({"op": op, "id": key, "name": f"n{key}", "balance": round(rng.random() * 1e4, 2),
                                    "version": version}).encode()
                for arm in ARMS:
                    p.produce(f"cdc_{arm}", key=str(key).encode(), value=value)
                self.changes += 1
            p.poll(0)
            tick += 1
            time.sleep(max(0.0, 0.1 - (time.time() - t)))
        p.flush(120)


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, own and reaped children) of ``pid`` and every live descendant."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                f = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(d.name)] = int(f[1])
            stats[int(d.name)] = f
    family, frontier = {pid}, [pid]
    while frontier:
        nxt = [c for c, par in parents.items() if par in frontier and c not in family]
        family.update(nxt)
        frontier = nxt
    return sum((int(stats[p][11]) + int(stats[p][12]) + int(stats[p][13]) + int(stats[p][14])) / tick
               for p in family if p in stats)
