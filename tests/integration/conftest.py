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
from icetide.services.object_store import PORTS_USED, LocalObjectStore
from icetide.services.registry import LocalRegistry
from icetide.services.rest_catalog import LocalRestCatalog
from icetide.services.spark_cluster import LocalSparkCluster
from tests.fixtures.stack import free_port_block, free_port_pair, pipeline_dict

#: JIT and GC of the short-lived Spark driver JVMs the tests start (`icetide run` and the CLI as
#: subprocesses, the benchmarks' runs): C1 only and the serial collector, which spend far less CPU
#: warming up a JVM that lives a minute (see tests/README.md for the measurement). Through
#: SPARK_SUBMIT_OPTS, which spark-submit adds to the driver's java command; the session's own
#: SparkSession (the `spark` fixture, alive the whole run) keeps the JVM's defaults.
#: ICETIDE_TEST_JVM_OPTS="" tests with the JVM's defaults everywhere.
TEST_JVM_OPTS = os.environ.get("ICETIDE_TEST_JVM_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
if TEST_JVM_OPTS and "SPARK_SUBMIT_OPTS" not in os.environ:
    os.environ["SPARK_SUBMIT_OPTS"] = TEST_JVM_OPTS


@pytest.fixture(scope="session", autouse=True)
def driver_class_archive(kafka: LocalKafka) -> Path | None:
    """The short-lived drivers also map their classes from a CDS archive (tests/fixtures/cds.py): made
    once per classpath by a small real run on this worker's broker (about 40 s), then every
    `icetide run` start loads thousands of classes fewer. ICETIDE_TEST_CDS=0 runs without it."""
    if os.environ.get("SPARK_SUBMIT_OPTS") != TEST_JVM_OPTS or os.environ.get("ICETIDE_TEST_CDS") == "0":
        return None
    from tests.fixtures import cds

    path = cds.archive(TEST_JVM_OPTS, kafka.bootstrap)
    os.environ["SPARK_SUBMIT_OPTS"] = cds.options(TEST_JVM_OPTS, path)
    return path


@pytest.fixture(scope="session")
def kafka() -> Iterator[LocalKafka]:
    fixed = os.environ.get("ICETIDE_TEST_KAFKA_PORT")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    # a fixed port per worker (its own broker: a worker's reset must not stop another's)
    port = int(fixed) + 2 * int(worker or 0) if fixed else free_port_pair()
    broker = LocalKafka(port=port)
    broker.reset()
    broker.start()
    yield broker
    broker.reset()


@pytest.fixture(scope="session")
def registry() -> Iterator[LocalRegistry]:
    """A Confluent-compatible schema registry (Apicurio, file storage), started once per session."""
    port = free_port_pair()
    server = LocalRegistry(port=port, management_port=port + 1)
    server.reset()
    server.start()
    yield server
    server.reset()


@pytest.fixture(scope="session")
def object_store() -> Iterator[LocalObjectStore]:
    """SeaweedFS (S3 + its own Iceberg REST catalog), started once per test session. Its credentials
    go into this process's environment: configs refer to them as ${AWS_ACCESS_KEY_ID}/${AWS_SECRET_ACCESS_KEY}."""
    store = LocalObjectStore(port=free_port_block(PORTS_USED))
    store.reset()
    store.start()
    os.environ.update(store.credentials().env())
    yield store
    store.reset()


@pytest.fixture(scope="session")
def rest_over_s3(object_store: LocalObjectStore) -> Iterator[LocalRestCatalog]:
    """Iceberg's reference REST catalog server, its warehouse on the object store."""
    server = LocalRestCatalog(port=free_port_pair(), store=object_store)
    server.reset()
    server.start()
    yield server
    server.reset()


@pytest.fixture(scope="session")
def s3_catalogs(object_store: LocalObjectStore, rest_over_s3: LocalRestCatalog) -> dict[str, dict[str, Any]]:
    """``catalog:`` sections of the two independent REST catalogs over the object store."""
    from icetide.services.stack import iceberg_rest_catalog, seaweedfs_rest_catalog

    return {"iceberg-rest": iceberg_rest_catalog(rest_over_s3, "s3iceberg"),
            "seaweedfs-rest": seaweedfs_rest_catalog(object_store, "s3seaweed")}


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[LocalSparkCluster]:
    """A Spark standalone master and two one-core workers (spark-daemon.sh from the pip PySpark)."""
    cluster = LocalSparkCluster(port=free_port_block(4), workers=2, cores_per_worker=1, memory_per_worker="1536m")
    cluster.reset()
    cluster.start()
    yield cluster
    cluster.reset()


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
    ours = TEST_JVM_OPTS and os.environ.get("SPARK_SUBMIT_OPTS", "").startswith(TEST_JVM_OPTS)
    opts = os.environ.pop("SPARK_SUBMIT_OPTS") if ours else None  # long-lived: the JVM's defaults
    try:
        session = build_session(load_config(path))
    finally:
        if opts is not None:
            os.environ["SPARK_SUBMIT_OPTS"] = opts
    yield session
    session.stop()


