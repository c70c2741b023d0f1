"""The local production-like stack of ``icetide dev``: Kafka, an object store, two REST catalogs over
it, a Spark standalone master + worker and a schema registry; and the config sections that reach them.

Secrets never appear in what this module prints or writes into configs: catalog sections refer to
``${AWS_ACCESS_KEY_ID}``/``${AWS_SECRET_ACCESS_KEY}``, which ``$ICETIDE_HOME/dev/env`` (mode 0600)
exports.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icetide import paths
from icetide.services.kafka import LocalKafka
from icetide.services.object_store import REGION, LocalObjectStore
from icetide.services.registry import LocalRegistry
from icetide.services.rest_catalog import LocalRestCatalog
from icetide.services.spark_cluster import LocalSparkCluster

S3FILEIO = "org.apache.iceberg.aws.s3.S3FileIO"
ENV_KEYS = {"s3.access-key-id": "${AWS_ACCESS_KEY_ID}", "s3.secret-access-key": "${AWS_SECRET_ACCESS_KEY}"}


def s3_properties(store: LocalObjectStore) -> dict[str, str]:
    """Iceberg FileIO properties for the store (Java's S3FileIO and PyIceberg read the same keys)."""
    return {"io-impl": S3FILEIO, "s3.endpoint": store.endpoint, "s3.path-style-access": "true",
            "client.region": REGION, "s3.region": REGION, **ENV_KEYS}


def iceberg_rest_catalog(rest: LocalRestCatalog, name: str = "icetide") -> dict[str, Any]:
    """Iceberg's reference REST server, its warehouse on the object store."""
    assert rest.store is not None
    return {"type": "rest", "name": name, "uri": rest.uri, "properties": s3_properties(rest.store)}


def seaweedfs_rest_catalog(store: LocalObjectStore, name: str = "icetide") -> dict[str, Any]:
    """SeaweedFS's own Iceberg REST catalog over its table bucket; requests signed with SigV4."""
    return {"type": "rest", "name": name, "uri": store.iceberg_uri, "warehouse": f"s3://{store.table_buckets[0]}",
            "properties": {**s3_properties(store), "rest.sigv4-enabled": "true", "rest.signing-name": "s3",
                           "rest.signing-region": REGION, "rest.access-key-id": "${AWS_ACCESS_KEY_ID}",
                           "rest.secret-access-key": "${AWS_SECRET_ACCESS_KEY}"}}


@dataclass(frozen=True)
class DevStack:
    """Fixed ports by default so the printed config stays valid across ``dev up`` runs."""

    kafka_port: int = 9092
    store_port: int = 8333
    rest_port: int = 8181
    spark_port: int = 7077
    registry_port: int = 8085

    @property
    def kafka(self) -> LocalKafka:
        return LocalKafka(port=self.kafka_port)

    @property
    def store(self) -> LocalObjectStore:
        return LocalObjectStore(port=self.store_port)

    @property
    def rest(self) -> LocalRestCatalog:
        return LocalRestCatalog(port=self.rest_port, store=self.store)

    @property
    def registry(self) -> LocalRegistry:
        return LocalRegistry(port=self.registry_port, management_port=self.registry_port + 1000)

    @property
    def spark(self) -> LocalSparkCluster:
        return LocalSparkCluster(port=self.spark_port)

    @property
    def dir(self) -> Path:
        return paths.home() / "dev"

    @property
    def env_file(self) -> Path:
        return self.dir / "env"

    def services(self) -> list[tuple[str, Any]]:
        return [("kafka", self.kafka), ("object store", self.store), ("iceberg rest catalog", self.rest),
                ("spark standalone", self.spark), ("schema registry", self.registry)]

    def write_env(self) -> Path:
        """``export`` lines for the store's credentials, mode 0600 (the secret is not printed)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        body = "".join(f"export {k}={v}\n" for k, v in self.store.credentials().env().items())
        fd = os.open(self.env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(body)
        return self.env_file

    def describe(self) -> dict[str, Any]:
        """What to put in a pipeline config to use the stack (no secret values)."""
        return {"source": {"bootstrap_servers": self.kafka.bootstrap, "schema_registry": {"url": self.registry.url}},
                "catalogs": {"iceberg-rest": iceberg_rest_catalog(self.rest),
                             "seaweedfs-rest": seaweedfs_rest_catalog(self.store)},
                "spark": {"master": self.spark.master_url},
                "env_file": str(self.env_file)}
