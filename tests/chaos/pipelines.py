"""The chaos run's pipelines: each ``icetide run`` in its own process group, and their configs.

- ``append``: JSON on two topics a pattern matches, routed by a field to four tables (JDBC catalog
  on SQLite, local warehouse);
- ``cdc``: Debezium JSON into one table by key (the same catalog);
- ``avro`` (full stack only): Debezium Avro through the schema registry into Iceberg's REST catalog
  over the S3 object store, the table's columns from the registry.

All three run in-run maintenance (hot compaction, expiry, manifest rewrites, orphan cleanup).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icetide.services.kafka import LocalKafka
from icetide.services.registry import LocalRegistry
from icetide.services.rest_catalog import LocalRestCatalog
from tests.chaos import checks
from tests.fixtures.stack import start


@dataclass
class Pipeline:
    """One pipeline's config and its live processes (the first is the main run)."""

    name: str
    cfg: Path
    workdir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)  # exit codes of runs that ended on their own
    #: second runs (the standby fault) that ended before their SIGTERM, or not with exit 0 within 240 s of it
    stopped_badly: list[str] = field(default_factory=list)

    def start(self, cfg: Path | None = None) -> subprocess.Popen[bytes]:
        log = self.workdir / f"run-{len(self.logs)}.log"
        self.logs.append(log)
        proc = start(cfg or self.cfg, log)
        self.procs.append(proc)
        return proc

    @property
    def main(self) -> subprocess.Popen[bytes]:
        return self.procs[0]

    def reap(self) -> None:
        """Runs that ended on their own (a finding: nothing may stop a pipeline) are noted and the
        main run is started again."""
        for p in list(self.procs):
            code = p.poll()
            if code is not None:
                self.exits.append(code)
                self.procs.remove(p)
        if not self.procs:
            self.start()

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.main.pid, sig)

    def kill(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(60)
        self.procs.clear()

    def stop(self, timeout: float = 300) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGCONT)
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)
        self.procs.clear()

    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"


def configs(kafka: LocalKafka, lake: Path, work: Path, prefix: str, orphan_age: float = 3600
            ) -> dict[str, dict[str, Any]]:
    """The ``append`` and ``cdc`` pipelines' configs, by key (``orphan_age``: orphan cleanup's age
    floor; under an hour only with ``ICETIDE_ORPHAN_FLOOR_SECONDS`` set)."""
    catalog = {"type": "jdbc", "uri": f"jdbc:sqlite:{lake / 'catalog.db'}", "warehouse": str(lake / "warehouse")}
    maintenance = {"in_run": True, "interval": "30 seconds", "min_interval": "15 seconds",
                   "log_table": "chaos.maintenance",
                   "policy": {"hot_partition_quiet_seconds": 20, "min_input_files": 3, "snapshots_trigger": 15,
                              "snapshot_retain_last": 5, "snapshot_max_age_seconds": 30, "manifests_trigger": 8,
                              "orphan_min_age_seconds": orphan_age,
                              "steps": ["expire_snapshots", "rewrite_data_files", "rewrite_position_delete_files",
                                        "rewrite_manifests", "remove_orphan_files"]}}
    stream = {"trigger_interval": "2 seconds", "takeover_after": "10 seconds", "restart_attempts": 50}
    spark = {"master": "local[2]", "conf": {"spark.driver.memory": "1g"}}
    health = {"webhook_url": f"http://chaos:{checks.SECRET}@127.0.0.1:9/hook"}
    append = {
        "name": "chaos-append",
        "source": {"bootstrap_servers": kafka.bootstrap, "topic_pattern": f"{prefix}-ev-(a|b)",
                   "starting_offsets": "earliest", "max_offsets_per_trigger": 3000},
        "catalog": catalog,
        "target": {"route": {"by": "field", "name": "kind", "table": "chaos.{value}"},
                   "partition_by": ["days(event_time)"]},
        "dead_letter": {"table": "chaos.dead_letters"},
        "stream": {**stream, "checkpoint_location": str(work / "append" / "checkpoint"),
                   "batch_log_table": "chaos.batches"},
        "maintenance": maintenance, "health": health, "spark": spark,
    }
    cdc = {
        "name": "chaos-cdc",
        "source": {"bootstrap_servers": kafka.bootstrap, "topics": [f"{prefix}-cdc"],
                   "starting_offsets": "earliest", "max_offsets_per_trigger": 3000},
        "catalog": catalog,
        "target": {"table": "chaos_cdc.customers", "schema": "id BIGINT, name STRING, balance DOUBLE",
                   "cdc": {"primary_key": ["id"], "format": "debezium", "ordering": "source.lsn",
                           "tombstones": True}},
        "dead_letter": {"table": "chaos_cdc.dead_letters"},
        "stream": {**stream, "checkpoint_location": str(work / "cdc" / "checkpoint"), "batch_log_table": None},
        "maintenance": {**maintenance, "log_table": "chaos_cdc.maintenance"}, "health": health, "spark": spark,
    }
    return {"append": append, "cdc": cdc}


def avro_config(kafka: LocalKafka, registry: LocalRegistry, rest: LocalRestCatalog, work: Path, prefix: str,
                like: dict[str, Any], master: str | None = None) -> dict[str, Any]:
    """The ``avro`` pipeline: ``like``'s stream, maintenance, health and Spark sections; on the
    standalone cluster at ``master`` when given (one one-core executor a run, so that a second run
    of it, the standby fault, gets the other worker)."""
    spark = like["spark"] if master is None else {
        "master": master, "conf": {**like["spark"].get("conf", {}), "spark.executor.memory": "1g",
                                   "spark.executor.cores": "1", "spark.cores.max": "1"}}
    from icetide.services.stack import iceberg_rest_catalog

    return {
        "name": "chaos-avro",
        "source": {"bootstrap_servers": kafka.bootstrap, "topics": [f"{prefix}-avro"], "format": "avro",
                   "schema_registry": {"url": registry.url, "max_wait_s": 600},
                   "starting_offsets": "earliest", "max_offsets_per_trigger": 3000},
        "catalog": iceberg_rest_catalog(rest, "chaosrest"),
        "target": {"table": "chaos_avro.customers",
                   "cdc": {"primary_key": ["id"], "format": "debezium", "ordering": "source.lsn",
                           "tombstones": True}},
        "dead_letter": {"table": "chaos_avro.dead_letters"},
        "stream": {**like["stream"], "checkpoint_location": str(work / "avro" / "checkpoint"),
                   "batch_log_table": "chaos_avro.batches"},
        "maintenance": {**like["maintenance"], "log_table": "chaos_avro.maintenance"},
        "health": like["health"], "spark": spark,
    }
