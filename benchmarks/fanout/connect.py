"""The fan-out benchmark's ``kafka-connect`` system: Apache Iceberg's own Kafka Connect sink
(``org.apache.iceberg:iceberg-kafka-connect``), the peer a team would pick instead of a Spark job.

It runs as Kafka's ``connect-standalone.sh`` runs it (``ConnectStandalone`` in one JVM, two sink tasks
for the two cores), on the same topic, the same events and the same catalog as the other systems,
into a table made like vanilla-tuned's (same schema, partitioning and table properties, made before
the clock starts; no ``_kafka_*`` columns: the sink writes none without an extra transform). Its commit
interval is the batch cadence of the regime. Its figures, as comparable to a Spark query's as they
can be made:

- the window opens when Connect reports both tasks RUNNING (after its JVM and plugin scan, as a Spark
  query's first batch starts after its session) and closes with the commit that holds the last event;
- *steady* counts the rows of the commits after the first over the time from the first to the last;
- CPU is the Connect JVM's over the window (``/proc``), per event landed.

The jars come from Maven Central on first use (``connect/pom.xml``), into ``$ICETIDE_HOME/jars/kafka-connect``.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.common import process_cpu_seconds

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
POM = HERE / "connect" / "pom.xml"
MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"
TASKS = int(os.environ.get("ICETIDE_BENCH_CONNECT_TASKS", "2"))


def jars() -> Path:
    """The sink's jars, fetched with Maven from ``connect/pom.xml`` once (again when the pom changes)."""
    from icetide import jvm, paths

    return jvm.maven_copy(POM, paths.home() / "jars" / "kafka-connect",
                          ["dependency:copy-dependencies", "-DincludeScope=runtime"], "the Kafka Connect sink's jars")


def create_table(cfg_path: Path) -> None:
    """The sink's table, made like vanilla-tuned's (schema, ``days(event_time)``, icetide's properties)."""
    from benchmarks.ingest.run import SCHEMA
    from icetide.config import load_config
    from icetide.spark import build_session

    cfg = load_config(cfg_path)
    spark = build_session(cfg)
    table = f"{cfg.catalog.name}.{cfg.target.table}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{cfg.target.table.split('.')[0]}")
    props = ", ".join(f"'{k}'='{v}'" for k, v in cfg.target.table_properties().items())
    spark.sql(f"CREATE TABLE {table} ({SCHEMA}) USING iceberg PARTITIONED BY (days(event_time)) "
              f"TBLPROPERTIES ({props})")
    spark.stop()


def properties(cfg: dict[str, Any], work: Path, name: str, port: int, commit_interval_s: float) -> tuple[str, str]:
    """(worker properties, connector properties) of one run."""
    cat = cfg["catalog"]
    interval_ms = max(1000, int(commit_interval_s * 1000))
    worker = {
        "bootstrap.servers": cfg["source"]["bootstrap_servers"],
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": str(work / f"{name}.offsets"),
        "listeners": f"http://127.0.0.1:{port}",
        "plugin.discovery": "only_scan",
        # A sink task polls Kafka for up to this long when no records come (default 60 s) and sees
        # the coordinator's commit requests only between polls: at the default, the commit holding
        # the end of a drained backlog waited up to two minutes (tried here). The commit interval.
        "offset.flush.interval.ms": str(interval_ms),
    }
    connector = {
        "name": name,
        "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
        "tasks.max": str(TASKS),
        "topics": ",".join(cfg["source"]["topics"]),
        "iceberg.tables": cfg["target"]["table"],
        "iceberg.catalog": cfg.get("catalog", {}).get("name", "icetide"),
        "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "iceberg.catalog.uri": cat["uri"],
        "iceberg.catalog.warehouse": cat["warehouse"],
        "iceberg.catalog.jdbc.schema-version": "V1",
        "iceberg.control.topic": f"control-{name}",
        "iceberg.control.group-id-prefix": f"cg-{name}",
        "iceberg.control.commit.interval-ms": str(interval_ms),
    }

    def text(d: dict[str, str]) -> str:
        return "".join(f"{k}={v}\n" for k, v in d.items())

    return text(worker), text(connector)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tasks_running(port: int, name: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/connectors/{name}/status", timeout=2) as r:
            status = json.loads(r.read())
    except OSError:
        return False
    tasks = status.get("tasks", [])
    failed = [t for t in tasks if t.get("state") == "FAILED"] + (
        [status["connector"]] if status.get("connector", {}).get("state") == "FAILED" else [])
    if failed:
        raise RuntimeError(f"the Iceberg sink failed: {str(failed[0].get('trace', failed[0]))[:2000]}")
    return len(tasks) == TASKS and all(t.get("state") == "RUNNING" for t in tasks)


def run(cfg: dict[str, Any], work: Path, expected: int, commit_interval_s: float,
        timeout_s: float = 1800) -> dict[str, Any]:
    """One run of the sink until the table holds ``expected`` rows (or ``timeout_s``); its figures."""
    import yaml

    from benchmarks.common import one_jvm
    from icetide.catalog import pyiceberg_catalog
    from icetide.config import load_config
    from icetide.demo.events import create_topic

    name = "bench-" + cfg["target"]["table"].split(".")[-1].replace("_", "-")
    cfg_path = work / f"{name}.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    if one_jvm():
        create_table(cfg_path)
    else:
        subprocess.run([sys.executable, "-m", "benchmarks.fanout.connect", "create", str(cfg_path)], cwd=REPO,
                       check=True, capture_output=True)
    # the control topic made first, as Iceberg's docs advise: left to auto-creation, the workers'
    # control consumers saw it only ~2 minutes later (tried here), and no commit completed before
    create_topic(cfg["source"]["bootstrap_servers"], f"control-{name}", 1)
    port = _free_port()
    worker_props, connector_props = properties(cfg, work, name, port, commit_interval_s)
    (work / f"{name}-worker.properties").write_text(worker_props)
    (work / f"{name}-connector.properties").write_text(connector_props)
    table = pyiceberg_catalog(load_config(cfg_path)).load_table(cfg["target"]["table"])
    log = open(work / f"{name}.log", "w")  # noqa: SIM115
    level = os.environ.get("ICETIDE_BENCH_CONNECT_LOG", "warn")  # info: Connect's and the consumers' own story
    cmd = ["java", "-Xmx4g", "-cp", f"{jars()}/*", f"-Dorg.slf4j.simpleLogger.defaultLogLevel={level}",
           "-Dorg.slf4j.simpleLogger.log.org.apache.iceberg.connect=info", "-Dorg.slf4j.simpleLogger.showDateTime=true",
           MAIN, str(work / f"{name}-worker.properties"), str(work / f"{name}-connector.properties")]
    jfr = os.environ.get("ICETIDE_BENCH_JFR")  # a CPU profile of the sink's JVM, as the Spark systems' get
    if jfr:
        cmd.insert(1, f"-XX:StartFlightRecording=filename={Path(jfr) / (name + '.jfr')},settings=profile")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        t0, cpu0 = _wait_running(proc, port, name, log.name)
        rows, deadline = 0, time.time() + timeout_s
        while rows < expected:
            if proc.poll() is not None:
                raise RuntimeError(f"Kafka Connect exited ({proc.returncode}); see {log.name}")
            if time.time() > deadline:
                raise RuntimeError(f"the sink landed {rows} of {expected} rows in {timeout_s:.0f} s; see {log.name}")
            _tasks_running(port, name)  # raises on a failed task
            time.sleep(1.0)
            table = table.refresh()
            snap = table.current_snapshot()
            rows = int(snap.summary["total-records"]) if snap is not None and snap.summary else 0
        cpu = process_cpu_seconds(proc.pid) - cpu0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    return figures(table.metadata.snapshots, t0, cpu, expected, commit_interval_s)


def _wait_running(proc: subprocess.Popen[bytes], port: int, name: str, log: str) -> tuple[float, float]:
    """(time, JVM CPU seconds) when both sink tasks run; raises if Connect dies or never gets there."""
    deadline = time.time() + 300
    while not _tasks_running(port, name):
        if proc.poll() is not None:
            raise RuntimeError(f"Kafka Connect exited ({proc.returncode}) before its tasks ran; see {log}")
        if time.time() > deadline:
            raise RuntimeError(f"the Iceberg sink's tasks were not running after 300 s; see {log}")
        time.sleep(0.2)
    return time.time(), process_cpu_seconds(proc.pid)


def figures(snapshots: list[Any], t0: float, cpu: float, expected: int, commit_interval_s: float) -> dict[str, Any]:
    """The fan-out report's row for the sink, from its table's snapshots (one per commit)."""
    commits = sorted((s for s in snapshots if s.summary and int(s.summary.get("added-records", 0)) > 0),
                     key=lambda s: s.timestamp_ms)
    last = commits[-1].summary
    rows = int(last["total-records"])
    t1 = commits[-1].timestamp_ms / 1000
    steady = None
    if len(commits) >= 3:
        later = sum(int(s.summary["added-records"]) for s in commits[1:])
        steady = round(later / ((commits[-1].timestamp_ms - commits[0].timestamp_ms) / 1000), 1)
    gaps = [round((b.timestamp_ms - a.timestamp_ms) / 1000, 3) for a, b in itertools.pairwise(commits)]
    return {"system": "kafka-connect", "rows": rows, "expected": expected, "processed": rows,
            "batches": len(commits), "seconds": round(t1 - t0, 3), "events_per_s": round(rows / (t1 - t0), 1),
            "steady_events_per_s": steady,
            "first_batch_s": round(commits[0].timestamp_ms / 1000 - t0, 3),
            "steady_batch_s": sorted(gaps)[len(gaps) // 2] if gaps else None, "batch_s": gaps,
            "jvm_cpu_s_per_m_events": round(cpu / rows * 1e6, 1),
            "trigger": f"commit every {commit_interval_s:g} s",
            "data_files": int(last.get("total-data-files", 0)), "data_bytes": int(last.get("total-files-size", 0))}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "create":
        create_table(Path(sys.argv[2]))
    else:
        sys.exit("usage: python -m benchmarks.fanout.connect create CONFIG (run by benchmarks.fanout.run)")
