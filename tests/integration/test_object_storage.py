"""The production path on object storage: an S3 store (SeaweedFS) under two independent REST
catalogs (Iceberg's reference server with S3FileIO, and SeaweedFS's own Iceberg catalog over a
table bucket, SigV4-signed). Exactly once through kills and a lost checkpoint, CDC final state,
maintenance whose orphan cleanup keeps an in-flight write's files, and the read-only commands."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
import uuid
from pathlib import Path

import pytest
import yaml

from icetide.config import load_config
from icetide.demo.events import create_topic
from tests.fixtures.lakes import attach_catalog, column, drifting_records, routed_pipeline, rows
from tests.fixtures.records import send
from tests.fixtures.stack import icetide_cli, kill_group, run_in_process, start, unique, wait_for

CATALOGS = ["iceberg-rest", "seaweedfs-rest"]
KINDS = ["k0", "k1", "k2"]
N_RECORDS = 16_000


@pytest.mark.parametrize("catalog", CATALOGS)
def test_exactly_once_then_maintenance_and_reads_on_object_storage(  # type: ignore[no-untyped-def]
        catalog, kafka, spark, s3_catalogs, tmp_path) -> None:
    seed = int(os.environ.get("ICETIDE_CRASH_SEED", time.time()))
    print(f"seed {seed}")
    rng = random.Random(seed)
    ns = unique("s3x")
    topic = f"s3x-{ns[4:]}"
    create_topic(kafka.bootstrap, topic, 4)
    values, ids, bad = drifting_records(N_RECORDS, KINDS, seed, bad_every=500)
    send(kafka.bootstrap, topic, values, 4)
    cfg = routed_pipeline(kafka, tmp_path, ns, topic, s3_catalogs[catalog])
    log = tmp_path / "run.log"

    # 1) after a completed batch, 2) while a commit is in flight, 3) at a random moment. The kill in a
    # commit is the one that meets the catalog's own commit; 1) and 3) are catalog-independent and run
    # on iceberg-rest (and on the embedded catalog in test_crash). On seaweedfs-rest one run lands a
    # batch and is killed inside the next one's commit: two JVM starts fewer, about 70 s of CI.
    every = catalog == "iceberg-rest"
    proc = start(cfg, log)
    wait_for(log, r'"event": "batch"', 0, timeout=300)
    if every:
        time.sleep(rng.uniform(0.0, 2.0))
        kill_group(proc)
        proc = start(cfg, log)
    pos = log.stat().st_size
    m = wait_for(log, r"committing batch (\d+) to (\S+)", pos, timeout=300)
    time.sleep(rng.uniform(0.0, 0.15))
    kill_group(proc)
    assert f'"batch": {m.group(1)},' not in log.read_text(errors="replace")[m.end():], "kill landed after the batch"
    if every:
        proc = start(cfg, log)
        time.sleep(rng.uniform(4.0, 12.0))
        kill_group(proc)
    # 4) the checkpoint is lost: the run resumes from the offsets the tables hold
    shutil.rmtree(tmp_path / "checkpoint", ignore_errors=True)
    pos = log.stat().st_size
    proc = start(cfg, log, "--until-idle", "--for", "600")
    assert proc.wait(700) == 0, log.read_text()[-3000:]
    assert "resuming from the offsets recorded in the tables" in log.read_text()[pos:]

    for kind in KINDS:
        got = column(cfg, f"{ns}.{kind}", "id")
        assert len(got) == len(set(got)), f"{kind}: duplicates"
        assert sorted(got) == sorted(ids[kind]), f"{kind}: {len(got)} rows, expected {len(ids[kind])}"
        devices = column(cfg, f"{ns}.{kind}", "device")  # the drifted field became a column
        assert 0 < sum(d is not None for d in devices) < len(devices)
    assert len(column(cfg, f"{ns}.dead_letters", "_kafka_offset")) == bad

    _maintenance_keeps_in_flight_files(spark, cfg, ns, ids)
    _read_only_commands(cfg, ns, ids)


def _maintenance_keeps_in_flight_files(spark, cfg: Path, ns: str, ids: dict[str, list[str]]) -> None:  # type: ignore[no-untyped-def]
    from icetide.lake import inflight
    from icetide.lake.table_io import TableIO
    from icetide.maintenance.cycle import run_cycle
    from icetide.maintenance.orphans import remove_orphans

    raw = yaml.safe_load(cfg.read_text())
    raw["maintenance"] = {"log_table": f"{ns}.maintenance", "rewrites_per_cycle": 8,
                          "policy": {"hot_partition_quiet_seconds": 0, "min_input_files": 2, "snapshots_trigger": 2,
                                     "snapshot_retain_last": 1, "snapshot_max_age_seconds": 1,
                                     "steps": ["rewrite_data_files", "expire_snapshots", "rewrite_manifests",
                                               "remove_orphan_files"]}}
    cfg.write_text(yaml.safe_dump(raw))
    attach_catalog(spark, cfg)
    mcfg = load_config(cfg)
    name = mcfg.catalog.name
    table = f"{name}.{ns}.k0"
    files_before = spark.sql(f"SELECT count(*) FROM {table}.files").first()[0]
    snaps_before = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]
    _, records = run_cycle(spark, mcfg, [f"{ns}.{k}" for k in KINDS])
    outcomes = {(r.table.split(".")[-1], str(r.step)): r.outcome for r in records}
    assert outcomes[("k0", "rewrite_data_files")] == "ok", records
    assert outcomes[("k0", "expire_snapshots")] == "ok", records
    assert spark.sql(f"SELECT count(*) FROM {table}.files").first()[0] < files_before
    assert spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0] < snaps_before

    # An orphan, and the data file of another process's write in flight (its marker under the table).
    io = TableIO.of(spark, table)
    orphan = f"{io.location}/data/orphan-{uuid.uuid4()}.parquet"
    pending = f"{io.location}/data/in-flight-{uuid.uuid4()}.parquet"
    inflight.mark(io, "other-writer", "run1", int(time.time() * 1000) - 5_000)
    io.write(orphan, b"PAR1 not referenced by any snapshot PAR1")
    io.write(pending, b"PAR1 an uncommitted batch PAR1")
    now = int(time.time() * 1000) + 1_000  # every unreferenced file is old enough, but for the marker
    kept = remove_orphans(spark, table, older_than_ms=now, dry_run=False)
    assert io.size(orphan) is not None and io.size(pending) is not None, kept
    inflight.clear(io, "other-writer", "run1")
    deleted = remove_orphans(spark, table, older_than_ms=int(time.time() * 1000) + 1_000, dry_run=False)
    assert orphan in deleted and pending in deleted
    assert io.size(orphan) is None and io.size(pending) is None
    assert not any("/metadata/" in d and d.endswith(".metadata.json") for d in deleted)
    assert sorted(column(cfg, f"{ns}.k0", "id")) == sorted(ids["k0"])  # nothing referenced was deleted


def _read_only_commands(cfg: Path, ns: str, ids: dict[str, list[str]]) -> None:
    """status, health, offsets and report read the object store through PyIceberg (no JVM)."""
    env = {**os.environ, "JAVA_HOME": "/nonexistent", "PATH": "/usr/bin:/bin"}
    name = load_config(cfg).catalog.name
    res = icetide_cli("status", "-c", str(cfg), "-n", ns, "-o", "json", "--engine", "pyiceberg", env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    status = {r["table"].removeprefix(f"{name}."): r for r in json.loads(res.stdout)}
    assert {f"{ns}.{k}" for k in KINDS} <= set(status)
    assert sum(status[f"{ns}.{k}"]["records"] for k in KINDS) == sum(len(v) for v in ids.values())
    res = icetide_cli("health", f"{ns}.k1", "-c", str(cfg), "-o", "json", "--engine", "pyiceberg", env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["records"] == len(ids["k1"])
    res = icetide_cli("offsets", "-c", str(cfg), "-o", "json", "--engine", "pyiceberg", env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    held = json.loads(res.stdout)
    [per_partition] = held[f"{name}.{ns}.k0"]["next_offsets"].values()  # one topic
    assert sum(per_partition.values()) == N_RECORDS  # every table holds the batch's end offsets
    page = cfg.parent / "report.html"
    res = icetide_cli("report", "-c", str(cfg), "--out", str(page), "--engine", "pyiceberg", env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"{ns}.k2" in page.read_text()


@pytest.mark.parametrize("catalog", CATALOGS)
def test_cdc_final_state_on_object_storage(catalog, kafka, spark, s3_catalogs, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.fixtures.cdc_stream import cdc_config, generate, send_changes

    ns = unique("s3cdc")
    topic, table = f"s3cdc-{ns[6:]}", f"{ns}.customers"
    create_topic(kafka.bootstrap, topic, 4)
    stream = generate(3000, 12_000, seed=43, debezium=True, bad_every=997)
    send_changes(kafka.bootstrap, topic, stream)
    cfg = cdc_config(kafka, tmp_path, tmp_path, topic, table, {"format": "debezium", "ordering": "source.lsn"})
    raw = yaml.safe_load(cfg.read_text())
    raw["catalog"] = s3_catalogs[catalog]
    raw["source"]["max_offsets_per_trigger"] = 8000
    raw["dead_letter"] = {"table": f"{ns}.customers_dlq"}
    cfg.write_text(yaml.safe_dump(raw))
    attach_catalog(spark, cfg)

    run_in_process(spark, cfg)

    got = {r[0]: (r[1], r[2]) for r in rows(cfg, table, ("id", "name", "balance"))}  # merge-on-read, via PyIceberg
    assert len(got) == len(rows(cfg, table, ("id",))), "duplicate keys"
    assert got == stream.final, (len(got), len(stream.final))
    assert len(column(cfg, f"{ns}.customers_dlq", "_kafka_offset")) == sum(stream.bad.values())
