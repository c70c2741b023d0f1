"""Transient faults are survived: the Kafka broker, then the REST catalog, stopped for 35 s while
`icetide run` streams; the run recovers by itself, nothing lost or duplicated."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from icetide.demo.events import create_topic, produce, sample_values
from icetide.services.kafka import LocalKafka
from icetide.services.rest_catalog import LocalRestCatalog
from tests.fixtures.stack import free_port_pair, pipeline_dict, start, table_ids, unique, wait_for

OUTAGE_SECONDS = 35


def _wait_for_rows(count: Callable[[], int], want: int, proc, log: Path, timeout: float = 600) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run exited ({proc.returncode}):\n{log.read_text()[-4000:]}"
        try:
            if count() >= want:
                return
        except Exception:
            pass
        time.sleep(2)
    raise AssertionError(f"not all rows landed within {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def _stop(proc, log: Path) -> None:  # type: ignore[no-untyped-def]
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(300) == 0, log.read_text()[-3000:]


def _through_an_outage(raw: dict[str, Any], workdir: Path, bootstrap: str, topic: str, n: int, seed: int,
                       down: Callable[[], object], up: Callable[[], object], ids: Callable[[], list[str]]) -> str:
    """Produce ``n`` events, run, take a service ``down`` for OUTAGE_SECONDS mid-stream, bring it
    ``up``, produce ``n`` more, wait for every id, SIGTERM; exactly the ids produced. The run's log."""
    first = produce(bootstrap, topic, sample_values(n, seed=seed), partitions=2)
    raw["source"]["max_offsets_per_trigger"] = n // 4
    path = workdir / "outage.yaml"
    path.write_text(yaml.safe_dump(raw))
    log = workdir / "run.log"
    proc = start(path, log)
    wait_for(log, r'"event": "batch"', 0, timeout=300)
    down()
    time.sleep(OUTAGE_SECONDS)
    up()
    second = produce(bootstrap, topic, sample_values(n, seed=seed + 1, first_id=n), partitions=2)
    want = set(first.ids) | set(second.ids)
    _wait_for_rows(lambda: len(ids()), len(want), proc, log)
    _stop(proc, log)
    got = ids()
    assert len(got) == len(set(got)) and set(got) == want
    return log.read_text()


def test_the_broker_stops_for_35_seconds_mid_stream(spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    broker = LocalKafka(port=free_port_pair())  # its own broker: the shared one stays up
    broker.reset()
    broker.start()
    try:
        topic, table = unique("outk"), f"it.{unique('outk')}"
        create_topic(broker.bootstrap, topic, 2)
        _through_an_outage(pipeline_dict(broker, lake, tmp_path, topic, table), tmp_path, broker.bootstrap, topic,
                           20_000, 21, broker.stop, broker.start, lambda: table_ids(spark, table))
    finally:
        broker.reset()


def test_the_rest_catalog_stops_for_35_seconds_mid_stream(kafka, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pyiceberg.catalog import load_catalog

    server = LocalRestCatalog(port=free_port_pair())
    server.reset()
    server.start()
    try:
        topic, name = unique("outr"), unique("outr")
        create_topic(kafka.bootstrap, topic, 2)
        raw = pipeline_dict(kafka, lake, tmp_path, topic, f"restout.{name}",
                            catalog={"type": "rest", "uri": server.uri, "name": "icetide"})

        def ids() -> list[str]:
            t = load_catalog("out", type="rest", uri=server.uri).load_table(f"restout.{name}")
            return [str(x) for x in t.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()]

        log = _through_an_outage(raw, tmp_path, kafka.bootstrap, topic, 10_000, 31, server.stop, server.start, ids)
        assert "restart" in log, "the outage should have failed at least one batch"
    finally:
        server.reset()
