"""Iceberg's reference REST catalog server (``RESTCatalogServer`` from iceberg-open-api's test
fixtures), backed by a JDBC catalog on SQLite, with its warehouse in a local folder or, given an
object store, in ``s3://<bucket>/rest`` through Iceberg's ``S3FileIO``. For tests and ``icetide dev``;
jars from ``icetide setup`` (profile ``rest``). S3 credentials reach it through its environment.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from icetide import jvm, paths
from icetide.errors import ServiceUnreachableError, SetupError
from icetide.services.object_store import LocalObjectStore
from icetide.services.process import port_open, read_pid, start_background, stop_pid

HOST = "127.0.0.1"


@dataclass(frozen=True)
class LocalRestCatalog:
    port: int = 8181
    store: LocalObjectStore | None = None
    bucket: str = "warehouse"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}/rest" if self.store else str(self.dir / "warehouse")

    @property
    def uri(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def dir(self) -> Path:
        return paths.home() / "rest" / str(self.port)

    @property
    def pid_file(self) -> Path:
        return self.dir / "rest.pid"

    def running(self) -> bool:
        return read_pid(self.pid_file) is not None

    def start(self, timeout: float = 60.0) -> LocalRestCatalog:
        if self.running():
            return self
        java = shutil.which("java")
        if java is None:
            raise SetupError("Java is not installed; install a JDK 17")
        if port_open(HOST, self.port):
            raise ServiceUnreachableError(f"port {self.port} on {HOST} is taken by another process")
        (self.dir / "warehouse").mkdir(parents=True, exist_ok=True)
        cp = os.pathsep.join(str(j) for j in jvm.jars("rest"))
        env = {
            "CATALOG_WAREHOUSE": self.warehouse,
            "CATALOG_URI": f"jdbc:sqlite:{self.dir / 'catalog.db'}",
            "CATALOG_JDBC_SCHEMA__VERSION": "V1",
            "REST_PORT": str(self.port),
            "CATALOG_REST_PORT": str(self.port),
        }
        if self.store is not None:
            env.update({"CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
                        "CATALOG_S3_ENDPOINT": self.store.endpoint,
                        "CATALOG_S3_PATH__STYLE__ACCESS": "true",
                        **self.store.credentials().env()})
        start_background([java, "-Xmx512m", f"-Drest.port={self.port}", "-cp", cp,
                          "org.apache.iceberg.rest.RESTCatalogServer"],
                         self.dir / "rest.out", self.pid_file, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise ServiceUnreachableError(
                    f"the REST catalog exited during start-up:\n{(self.dir / 'rest.out').read_text()[-2000:]}"
                )
            if port_open(HOST, self.port):
                return self
            time.sleep(0.3)
        raise ServiceUnreachableError(f"the REST catalog on {self.uri} was not ready in {timeout:.0f}s")

    def stop(self) -> bool:
        return stop_pid(self.pid_file)

    def reset(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
