"""Fixtures: a real Kafka broker (KRaft), a real Iceberg JDBC/SQLite lake, real Spark.

Every test uses uuid-suffixed topics and tables, so tests share the broker, the lake and the
SparkSession without seeing each other.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.config import load_config
from icetide.services.kafka import LocalKafka
from tests.fixtures.stack import free_port_pair, pipeline_dict


@pytest.fixture(scope="session")
def kafka() -> Iterator[LocalKafka]:
    broker = LocalKafka(port=int(os.environ.get("ICETIDE_TEST_KAFKA_PORT") or free_port_pair()))
    broker.reset()
    broker.start()
    yield broker
    broker.reset()


@pytest.fixture(scope="session")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the session's catalog DB and warehouse."""
    return tmp_path_factory.mktemp("lake")


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


