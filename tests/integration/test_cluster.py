"""On a Spark standalone cluster (a master and two workers started by spark-daemon.sh), warehouse on
the object store through a REST catalog, so executors share nothing with the driver but S3: the
driver SIGKILLed (first run submitted with spark-submit), and a worker SIGKILLed in the middle of a
batch (Spark reruns its tasks on the other worker). Every id exactly once."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import yaml

from icetide.demo.events import create_topic, produce, sample_values
from tests.fixtures.lakes import column
from tests.fixtures.stack import kill_group, pipeline_dict, start, unique, wait_for

N_EVENTS = 30_000


def _cluster_config(kafka: Any, cluster: Any, catalog: dict[str, Any], workdir: Path, topic: str, table: str) -> Path:
    cfg = pipeline_dict(kafka, workdir, workdir, topic, table, catalog=catalog)
    cfg["source"]["max_offsets_per_trigger"] = 5000
    cfg["spark"] = {"master": cluster.master_url,
                    "conf": {"spark.driver.memory": "1g", "spark.executor.memory": "1g", "spark.executor.cores": "1",
                             "spark.cores.max": "2", "spark.sql.shuffle.partitions": "4"}}
    path = workdir / "cluster.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _assert_exact(cfg: Path, table: str, produced: Any) -> None:
    ids = column(cfg, table, "id")
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicates"
    assert set(ids) == set(produced.ids) and len(ids) == produced.good
    assert len(column(cfg, f"{table}_dlq", "_kafka_offset")) == produced.bad


def test_cluster_driver_sigkill_then_exactly_once(kafka, spark_cluster, s3_catalogs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("ICETIDE_CRASH_SEED", time.time()))
    print(f"seed {seed}")
    rng = random.Random(seed)
    topic, table = unique("cl"), f"{unique('clns')}.events"
    create_topic(kafka.bootstrap, topic, 4)
    produced = produce(kafka.bootstrap, topic, sample_values(N_EVENTS, bad_every=500), partitions=4)
    cfg = _cluster_config(kafka, spark_cluster, s3_catalogs["iceberg-rest"], tmp_path, topic, table)
    log = tmp_path / "run.log"

    proc = start(cfg, log, command="submit")  # spark-submit, client mode
    wait_for(log, r'"event": "batch"', 0, timeout=300)
    time.sleep(rng.uniform(0.0, 2.0))
    kill_group(proc)
    pos = log.stat().st_size
    proc = start(cfg, log)
    wait_for(log, r"committing batch (\d+) to (\S+)", pos, timeout=300)
    time.sleep(rng.uniform(0.0, 0.3))
    kill_group(proc)

    proc = start(cfg, log, "--until-idle", "--for", "600")
    assert proc.wait(700) == 0, log.read_text()[-3000:]
    _assert_exact(cfg, table, produced)


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (read from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_cluster_worker_sigkill_mid_batch_then_exactly_once(kafka, spark_cluster, s3_catalogs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic, table = unique("clw"), f"{unique('clwns')}.events"
    create_topic(kafka.bootstrap, topic, 4)
    produced = produce(kafka.bootstrap, topic, sample_values(N_EVENTS, bad_every=500), partitions=4)
    cfg = _cluster_config(kafka, spark_cluster, s3_catalogs["seaweedfs-rest"], tmp_path, topic, table)
    log = tmp_path / "run.log"
    spark_cluster.wait_ready()

    proc = start(cfg, log, "--until-idle", "--for", "600")
    wait_for(log, r'"event": "batch"', 0, timeout=300)  # tables exist; the next batch is a normal one
    m = wait_for(log, r"committing batch (\d+) to (\S+)", log.stat().st_size, timeout=300)
    worker = spark_cluster.worker_pid(1)
    assert worker is not None
    executors = _children(worker)
    for pid in [*executors, worker]:  # the worker JVM and the executor it launched, mid-write
        os.kill(pid, signal.SIGKILL)
    killed_during = f'"batch": {m.group(1)},' not in log.read_text(errors="replace")[m.end():]
    assert killed_during, "the batch finished before the worker was killed"
    assert executors, "worker 1 had no executor"
    assert proc.wait(700) == 0, log.read_text()[-3000:]
    _assert_exact(cfg, table, produced)
    spark_cluster.start_worker(1)  # back to two workers for whoever comes next
    spark_cluster.wait_ready()
