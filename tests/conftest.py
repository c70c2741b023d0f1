"""Fixtures: a real Kafka broker (KRaft), a real Iceberg JDBC/SQLite lake, real Spark.

Every test uses uuid-suffixed topics and tables, so tests share the broker, the lake and the
SparkSession without seeing each other.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ICETIDE_HOME", str(REPO / ".icetide"))

from icetide.config import load_config  # noqa: E402
from icetide.services.kafka import LocalKafka  # noqa: E402
from icetide.services.process import port_open  # noqa: E402


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _free_port_pair() -> int:
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(20000, 40000)
        if not port_open("127.0.0.1", p) and not port_open("127.0.0.1", p + 1):
            return p
    raise RuntimeError("no free port pair found")


@pytest.fixture(scope="session")
def kafka() -> Iterator[LocalKafka]:
    broker = LocalKafka(port=int(os.environ.get("ICETIDE_TEST_KAFKA_PORT") or _free_port_pair()))
    broker.reset()
    broker.start()
    yield broker
    broker.reset()


@pytest.fixture(scope="session")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the session's catalog DB and warehouse."""
    return tmp_path_factory.mktemp("lake")


def pipeline_dict(kafka: LocalKafka, lake: Path, workdir: Path, topic: str, table: str,
                  **overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "name": table.split(".")[-1].replace("_", "-"),
        "source": {"bootstrap_servers": kafka.bootstrap, "topics": [topic],
                   "starting_offsets": "earliest", "max_offsets_per_trigger": 20000},
        "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{lake / 'catalog.db'}",
                    "warehouse": str(lake / "warehouse")},
        "target": {"table": table,
                   "schema": "id STRING, event_time TIMESTAMP, user_id BIGINT, event_type STRING, amount DOUBLE",
                   "partition_by": ["days(event_time)"]},
        "dead_letter": {"table": f"{table.split('.')[0]}.{table.split('.')[1]}_dlq"},
        "stream": {"trigger_interval": "2 seconds", "checkpoint_location": str(workdir / "checkpoint")},
        "spark": {"master": "local[2]", "conf": {"spark.driver.memory": "2g"}},
    }
    for key, value in overrides.items():
        section, _, field = key.partition("__")
        if field:
            cfg[section][field] = value
        else:
            cfg[section] = value
    return cfg


@pytest.fixture
def make_pipeline(kafka: LocalKafka, lake: Path, tmp_path: Path) -> Callable[..., Path]:
    """Write a pipeline YAML for ``topic`` → ``table``; overrides as ``section__key=value``."""

    def make(topic: str, table: str, **overrides: Any) -> Path:
        path = tmp_path / f"{table.replace('.', '_')}.yaml"
        path.write_text(yaml.safe_dump(pipeline_dict(kafka, lake, tmp_path, topic, table, **overrides)))
        return path

    return make


@pytest.fixture(scope="session")
def spark(kafka: LocalKafka, lake: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One SparkSession for in-process pipelines and assertions (same catalog as every test)."""
    from icetide.spark import build_session

    work = tmp_path_factory.mktemp("session")
    path = work / "session.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict(kafka, lake, work, "unused", "test.unused")))
    session = build_session(load_config(path))
    yield session
    session.stop()


def icetide_cli(*args: str, timeout: float = 600, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "icetide.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, **kw)


def table_ids(spark, table: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [r[0] for r in spark.sql(f"SELECT id FROM icetide.{table}").collect()]
