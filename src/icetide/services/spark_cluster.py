"""A local Spark standalone cluster from the pip PySpark: one master and ``workers`` workers, each
started with Spark's own ``sbin/spark-daemon.sh`` (``org.apache.spark.deploy.master.Master`` /
``org.apache.spark.deploy.worker.Worker``) on 127.0.0.1. State and logs in
``$ICETIDE_HOME/spark/<port>/``. ``icetide run`` reaches it with ``spark.master: spark://…``
(client mode) or through ``spark-submit``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from icetide import paths
from icetide.errors import ServiceUnreachableError, SetupError
from icetide.services.process import port_open, read_pid

HOST = "127.0.0.1"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The pip PySpark's folder, which is a complete ``SPARK_HOME`` (bin/, sbin/, jars/)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "sbin" / "spark-daemon.sh").exists():
        raise SetupError(f"{home} has no sbin/spark-daemon.sh; reinstall pyspark")
    return home


@dataclass(frozen=True)
class LocalSparkCluster:
    """Master on ``port`` (web UI ``port + 1``); worker ``i`` web UI on ``port + 2 + i``."""

    port: int = 7077
    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "2g"

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def ui(self) -> str:
        return f"http://{HOST}:{self.port + 1}"

    @property
    def dir(self) -> Path:
        return paths.home() / "spark" / str(self.port)

    def _env(self) -> dict[str, str]:
        d = self.dir
        return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_PID_DIR": str(d / "pids"),
                "SPARK_LOG_DIR": str(d / "logs"), "SPARK_IDENT_STRING": f"icetide{self.port}",
                "SPARK_WORKER_DIR": str(d / "work"), "SPARK_LOCAL_IP": HOST}

    def _daemon(self, action: str, cls: str, instance: int, *args: str) -> None:
        cmd = ["bash", str(spark_home() / "sbin" / "spark-daemon.sh"), action, cls, str(instance), *args]
        out = self.dir / "logs" / "spark-daemon.out"
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "ab") as log:  # a file, not a pipe: the daemon keeps its inherited descriptors
            proc = subprocess.run(cmd, env=self._env(), stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=120)
        if proc.returncode != 0 and action == "start":
            raise ServiceUnreachableError(f"spark-daemon.sh start {cls} failed:\n{out.read_text()[-2000:]}")

    def pid_file(self, cls: str, instance: int) -> Path:
        return self.dir / "pids" / f"spark-icetide{self.port}-{cls}-{instance}.pid"

    def worker_pid(self, instance: int) -> int | None:
        return read_pid(self.pid_file(WORKER, instance))

    def running(self) -> bool:
        return read_pid(self.pid_file(MASTER, 1)) is not None

    def start(self, timeout: float = 90.0) -> LocalSparkCluster:
        if shutil.which("java") is None:
            raise SetupError("Java is not installed; install a JDK 17")
        for sub in ("pids", "logs", "work"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        if not self.running():
            if port_open(HOST, self.port):
                raise ServiceUnreachableError(f"port {self.port} on {HOST} is taken by another process")
            self._daemon("start", MASTER, 1, "--host", HOST, "--port", str(self.port),
                         "--webui-port", str(self.port + 1))
        for i in range(1, self.workers + 1):
            self.start_worker(i)
        self.wait_ready(timeout)
        return self

    def start_worker(self, instance: int) -> None:
        if self.worker_pid(instance) is None:
            self._daemon("start", WORKER, instance, "--host", HOST, "--cores", str(self.cores_per_worker),
                         "--memory", self.memory_per_worker, "--webui-port", str(self.port + 1 + instance),
                         "--work-dir", str(self.dir / "work"), self.master_url)

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"{self.ui}/json/", timeout=3) as r:
                state = json.load(r)
        except Exception:
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def wait_ready(self, timeout: float = 90.0, workers: int | None = None) -> None:
        want = self.workers if workers is None else workers
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_workers() >= want:
                return
            time.sleep(0.5)
        raise ServiceUnreachableError(
            f"the Spark master on {self.master_url} did not see {want} workers in {timeout:.0f}s "
            f"(logs: {self.dir / 'logs'})")

    def stop(self) -> bool:
        was = self.running()
        if not self.dir.exists():
            return False
        for i in range(1, self.workers + 1):
            self._daemon("stop", WORKER, i)
        self._daemon("stop", MASTER, 1)
        return was

    def reset(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
