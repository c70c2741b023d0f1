"""On a Spark standalone cluster (a master and two workers started by spark-daemon.sh), warehouse on
the object store through a REST catalog, so executors share nothing with the driver but S3: the
driver SIGKILLed (the run submitted with spark-submit), then a worker SIGKILLed in the middle of a
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
from tests.fixtures.stack import children, kill_group, pipeline_dict, start, unique, wait_for

N_EVENTS = 24_000


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


def test_cluster_driver_then_worker_sigkilled_exactly_once(kafka, spark_cluster, s3_catalogs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("ICETIDE_CRASH_SEED", time.time()))
    print(f"seed {seed}")
    rng = random.Random(seed)
    topic, table = unique("cl"), f"{unique('clns')}.events"
    create_topic(kafka.bootstrap, topic, 4)
    produced = produce(kafka.bootstrap, topic, sample_values(N_EVENTS, bad_every=500), partitions=4)
    cfg = _cluster_config(kafka, spark_cluster, s3_catalogs["iceberg-rest"], tmp_path, topic, table)
    log = tmp_path / "run.log"

    # 1) the driver, submitted with spark-submit (client mode), SIGKILLed after a batch
    proc = start(cfg, log, command="submit")
    wait_for(log, r'"event": "batch"', 0, timeout=300)
    time.sleep(rng.uniform(0.0, 2.0))
    kill_group(proc)

    # 2) restarted; a worker JVM and the executor it launched SIGKILLed in the middle of a batch's write:
    # Spark reruns the lost tasks on the other worker's executor and the run goes on to the end
    spark_cluster.wait_ready()
    pos = log.stat().st_size
    proc = start(cfg, log, "--until-idle", "--for", "600")
    m = wait_for(log, r"committing batch (\d+) to (\S+)", pos, timeout=300)
    worker = spark_cluster.worker_pid(1)
    assert worker is not None
    executors = children(worker)
    for pid in [*executors, worker]:
        os.kill(pid, signal.SIGKILL)
    assert executors, "worker 1 ran no executor"
    assert f'"batch": {m.group(1)},' not in log.read_text(errors="replace")[m.end():], "the batch finished first"
    assert proc.wait(700) == 0, log.read_text()[-3000:]
    _assert_exact(cfg, table, produced)
    spark_cluster.start_worker(1)
    spark_cluster.wait_ready()
