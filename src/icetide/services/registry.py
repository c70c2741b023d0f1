"""A local Confluent-compatible schema registry: Apicurio Registry 3.0.9 (Java 17), for ``icetide dev``,
the Avro demo, tests and CI. Fetched by ``icetide setup`` (jar profile ``registry``: the ``all``
tar.gz from Maven Central), unpacked once under ``$ICETIDE_HOME/registry/app``.

Storage is H2 in a file under the registry's folder, so schema ids survive a restart (with the
default in-memory storage every id would change, and records already in Kafka would name ids the
registry no longer knows). Both ports bind 127.0.0.1. The Confluent API is at
``/apis/ccompat/v7``; Apicurio's default compatibility is NONE, so ``start`` sets BACKWARD, as
Confluent's own default.
"""

from __future__ import annotations

import fcntl
import http.client
import json
import shutil
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from icetide import jvm, paths
from icetide.errors import ServiceUnreachableError, SetupError
from icetide.services.process import port_open, read_pid, start_background, stop_pid

HOST = "127.0.0.1"
CCOMPAT = "/apis/ccompat/v7"
RUNNER = "apicurio-registry-app-3.0.9-runner.jar"


def _app_dir() -> Path:
    """The unpacked Apicurio application (shared by every registry port). Unpacked under a file lock,
    so that registries started at once (tests side by side, two `icetide dev up`) unpack it once."""
    out = paths.home() / "registry" / "app"
    if (out / RUNNER).exists():
        return out
    archives = [j for j in jvm.jar_dir("registry").glob("apicurio-registry-app-*.tar.gz")]
    if not archives:
        raise SetupError(f"the schema registry is not in {jvm.jar_dir('registry')}; run `icetide setup`")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "app.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / RUNNER).exists():  # another process unpacked it while this one waited
            return out
        tmp = out.with_name("app.partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(archives[0]) as tar:
            tar.extractall(tmp, filter="data")
        runners = list(tmp.rglob(RUNNER))
        if not runners:
            raise SetupError(f"{archives[0].name} holds no {RUNNER}")
        shutil.rmtree(out, ignore_errors=True)
        runners[0].parent.rename(out)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


@dataclass(frozen=True)
class LocalRegistry:
    port: int = 8085
    management_port: int = 9085

    @property
    def url(self) -> str:
        """What ``source.schema_registry.url`` takes (the Confluent-compatible API)."""
        return f"http://{HOST}:{self.port}{CCOMPAT}"

    @property
    def dir(self) -> Path:
        return paths.home() / "registry" / str(self.port)

    @property
    def pid_file(self) -> Path:
        return self.dir / "registry.pid"

    def running(self) -> bool:
        return read_pid(self.pid_file) is not None

    def ready(self) -> bool:
        if not port_open(HOST, self.port):  # no listener, or a connection to itself (see port_open)
            return False
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as r:
                return bool(r.status == 200)
        except (OSError, http.client.HTTPException):  # not an HTTP answer (yet)
            return False

    def start(self, timeout: float = 90.0) -> LocalRegistry:
        if self.running() and self.ready():
            return self
        java = shutil.which("java")
        if java is None:
            raise SetupError("Java is not installed; install a JDK 17")
        if port_open(HOST, self.port):
            raise ServiceUnreachableError(f"port {self.port} on {HOST} is taken by another process")
        app = _app_dir()
        self.dir.mkdir(parents=True, exist_ok=True)
        db = self.dir / "registry-db"
        start_background([
            java, "-Xmx384m", f"-Dquarkus.http.host={HOST}", f"-Dquarkus.http.port={self.port}",
            f"-Dquarkus.management.host={HOST}", f"-Dquarkus.management.port={self.management_port}",
            "-Dapicurio.storage.kind=sql", "-Dapicurio.storage.sql.kind=h2",
            f"-Dapicurio.datasource.url=jdbc:h2:file:{db};DB_CLOSE_ON_EXIT=FALSE",
            "-Dapicurio.datasource.username=sa", "-Dapicurio.datasource.password=sa",
            "-Dquarkus.log.level=WARN", "-jar", str(app / RUNNER),
        ], self.dir / "registry.out", self.pid_file, cwd=self.dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise ServiceUnreachableError(
                    f"the schema registry exited during start-up:\n{(self.dir / 'registry.out').read_text()[-2000:]}")
            if self.ready():
                self._set_compatibility("BACKWARD")
                return self
            time.sleep(0.5)
        raise ServiceUnreachableError(f"the schema registry on {self.url} was not ready in {timeout:.0f}s")

    def _set_compatibility(self, level: str) -> None:
        req = urllib.request.Request(f"{self.url}/config", data=json.dumps({"compatibility": level}).encode(),
                                     method="PUT", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self) -> bool:
        return stop_pid(self.pid_file)

    def reset(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
