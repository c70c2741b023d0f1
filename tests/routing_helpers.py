"""Producing arbitrary records (values, keys, headers) and waiting for tables, for routing tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Producer

Record = tuple[bytes | None, list[tuple[str, bytes]] | None]


def send(bootstrap: str, topic: str, records: Iterable[Record | bytes | None], partitions: int = 1) -> int:
    """Produce ``records`` (value, or (value, headers)) round-robin over partitions; flush."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                  "queue.buffering.max.messages": 500000, "message.max.bytes": 10_000_000})
    n = 0
    for i, rec in enumerate(records):
        value, headers = rec if isinstance(rec, tuple) else (rec, None)
        while True:
            try:
                p.produce(topic, value=value, key=str(i).encode(), partition=i % partitions,
                          headers=headers or None)
                break
            except BufferError:
                p.poll(0.1)
        n += 1
        if i % 5000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError(f"not everything was delivered to {topic}")
    return n


def dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


class Background:
    """Run a pipeline in a thread of this process (same SparkSession as the assertions)."""

    def __init__(self, runner: Any, seconds: float = 900) -> None:
        self.runner = runner
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(seconds,), daemon=True)

    def _run(self, seconds: float) -> None:
        try:
            self.runner.run(duration=seconds)
        except BaseException as e:  # surfaced by stop()
            self.error = e

    def __enter__(self) -> Background:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.request_stop("test done")
        self.thread.join(300)
        self.runner.close()
        if self.error is not None and exc[0] is None:
            raise self.error
