"""A single-node Apache Kafka broker (KRaft, broker+controller) on 127.0.0.1.

The jars come from Maven Central (``icetide setup`` / profile ``kafka``); no Kafka download, no
Docker. State lives in ``$ICETIDE_HOME/kafka/<port>/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from icetide import jvm, paths
from icetide.errors import ServiceUnreachableError, SetupError
from icetide.services.process import port_open, read_pid, start_background, stop_pid

HOST = "127.0.0.1"


@dataclass(frozen=True)
class LocalKafka:
    """A dev broker listening on ``port`` (controller on ``port + 1``)."""

    port: int = 9092
    partitions: int = 4

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def dir(self) -> Path:
        return paths.home() / "kafka" / str(self.port)

    @property
    def pid_file(self) -> Path:
        return self.dir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / "broker.out"

    def running(self) -> bool:
        return read_pid(self.pid_file) is not None

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise SetupError("Java is not installed; install a JDK 17 (apt-get install openjdk-17-jdk-headless)")
        return java

    def _write_config(self) -> Path:
        d = self.dir
        (d / "data").mkdir(parents=True, exist_ok=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{HOST}:{self.port + 1}",
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.port + 1}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(d / "data"),
            "num.partitions": str(self.partitions),
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.hours": "-1",
            "message.max.bytes": str(16 * 1024 * 1024),
        }
        cfg = d / "server.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (d / "log4j2.properties").write_text(jvm.log4j2_properties(d / "kafka.log", loggers={"kafka": "info"}))
        return cfg

    def _classpath(self) -> str:
        return os.pathsep.join(str(j) for j in jvm.jars("kafka"))

    def _jvm_args(self) -> list[str]:
        return [self._java(), "-Xms256m", "-Xmx1g", "-XX:+UseG1GC",
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
                "-cp", self._classpath()]

    def start(self, timeout: float = 90.0) -> LocalKafka:
        """Format storage on first start, launch the broker, wait until it serves metadata."""
        if self.running():
            self.wait_ready(timeout)
            return self
        if port_open(HOST, self.port):
            raise ServiceUnreachableError(
                f"port {self.port} on {HOST} is taken by another process; pick another with --port"
            )
        cfg = self._write_config()
        if not (self.dir / "data" / "meta.properties").exists():
            fmt = subprocess.run(
                [*self._jvm_args(), "kafka.tools.StorageTool", "format", "-t", str(uuid.uuid4()),
                 "-c", str(cfg), "--standalone"],
                capture_output=True, text=True,
            )
            if fmt.returncode != 0:
                raise SetupError(f"formatting Kafka storage failed: {fmt.stdout}{fmt.stderr}")
        start_background([*self._jvm_args(), "kafka.Kafka", str(cfg)], self.log_file, self.pid_file)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 90.0) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
                raise ServiceUnreachableError(f"the Kafka broker exited during start-up:\n{tail}")
            if port_open(HOST, self.port):
                try:
                    md = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=5)
                    if md.brokers:
                        return
                except Exception:
                    pass
            time.sleep(0.5)
        raise ServiceUnreachableError(f"the Kafka broker on {self.bootstrap} was not ready in {timeout:.0f}s")

    def stop(self) -> bool:
        return stop_pid(self.pid_file, timeout=60)

    def reset(self) -> None:
        """Stop and delete all broker state."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
