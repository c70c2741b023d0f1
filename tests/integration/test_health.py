"""Health figures on real tables built to known shapes; every figure equals the known truth."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client import start_http_server
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from icetide.config import load_config
from icetide.config.thresholds import HealthThresholds
from icetide.health.collector import collect
from icetide.health.metrics import HealthCollector
from icetide.health.watch import collect_all
from icetide.lake.meta_spark import SparkMeta
from tests.fixtures.stack import free_port_pair, icetide_cli, pipeline_dict, unique


def build_known_table(spark, table: str) -> None:  # type: ignore[no-untyped-def]
    """7 two-row files in partition a, 3 in b, then 2 merge-on-read row deletes in a: 12 snapshots.

    (Two rows per file: a DELETE matching a whole file drops the file instead of writing a
    position delete.)"""
    spark.sql("CREATE NAMESPACE IF NOT EXISTS icetide.hl")
    spark.sql(f"CREATE TABLE icetide.{table} (id BIGINT, p STRING) USING iceberg PARTITIONED BY (p) "
              "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
              "'write.target-file-size-bytes'='1048576')")
    for i in range(7):
        spark.sql(f"INSERT INTO icetide.{table} VALUES ({i}, 'a'), ({i + 1000}, 'a')")
    for i in range(3):
        spark.sql(f"INSERT INTO icetide.{table} VALUES ({100 + i}, 'b'), ({1100 + i}, 'b')")
    spark.sql(f"DELETE FROM icetide.{table} WHERE id = 1")
    spark.sql(f"DELETE FROM icetide.{table} WHERE id = 2")


@pytest.fixture(scope="module")
def known(spark):  # type: ignore[no-untyped-def]
    table = f"hl.{unique('known')}"
    build_known_table(spark, table)
    return table


def test_every_figure_equals_the_known_truth(spark, known) -> None:  # type: ignore[no-untyped-def]
    h = collect(SparkMeta(spark, "icetide"), known)
    parts = {json.loads(p.partition)["p"]: p for p in h.partitions}
    a, b = parts["a"], parts["b"]
    assert (a.data_files, a.records, a.small_files) == (7, 14, 7)
    assert (b.data_files, b.records, b.small_files) == (3, 6, 3)
    assert (a.position_delete_files, a.position_delete_records) == (2, 2)
    assert (b.position_delete_files, a.equality_delete_files) == (0, 0)
    assert a.delete_ratio == pytest.approx(2 / 14)
    assert h.data_files == 10 and h.records == 20 and h.delete_files == 2 and h.deleted_records == 2
    assert h.snapshots == 12
    assert h.manifests == 12 and h.delete_manifests == 2
    assert h.target_file_bytes == 1048576 and h.small_file_bytes == int(1048576 * 0.75)
    assert h.max_partition_files == 7 and len(h.partitions) == 2
    assert a.hot and b.hot  # just written
    files = spark.sql(f"SELECT sum(file_size_in_bytes) FROM icetide.{known}.files WHERE content = 0").first()[0]
    assert h.data_bytes == files
    latest = spark.sql(f"SELECT file FROM icetide.{known}.metadata_log_entries ORDER BY timestamp DESC").first()[0]
    assert h.metadata_file_bytes == Path(latest.removeprefix("file:")).stat().st_size
    assert h.commits_last_hour == 12


def test_thresholds_tiers_and_reasons(spark, known) -> None:  # type: ignore[no-untyped-def]
    th = HealthThresholds(partition_files_warning=5, partition_files_critical=8)
    h = collect(SparkMeta(spark, "icetide"), known, th)
    parts = {json.loads(p.partition)["p"]: p for p in h.partitions}
    # the documented formula: files (7-1)/(8-1)*50, small 7/7*0.7*25, deletes (2/14)/0.3*25
    assert parts["a"].reasons == [
        "-42.9: 7 data files", "-17.5: 7/7 small files", "-11.9: delete ratio 0.143",
        "warning: data files = 7 (warning at 5)", "warning: delete ratio = 0.142857 (warning at 0.1)",
        "critical: score 27.7 < 50",
    ]
    assert (parts["a"].score, parts["a"].tier) == (27.7, "critical")
    assert (parts["b"].score, parts["b"].tier) == (78.2, "warning")  # 100 - (3-1)/7*50 - 3/3*0.3*25
    assert h.tier in ("warning", "critical")
    assert any('data files in partition {"p":"a"} = 7 (warning at 5)' in r for r in h.reasons)
    crit = collect(SparkMeta(spark, "icetide"), known,
                   HealthThresholds(partition_files_warning=2, partition_files_critical=6))
    assert crit.tier == "critical"


def test_collection_never_reads_data_files(spark, known, tmp_path) -> None:  # type: ignore[no-untyped-def]
    before = collect(SparkMeta(spark, "icetide"), known)
    location = spark.sql(f"DESCRIBE TABLE EXTENDED icetide.{known}").where("col_name = 'Location'").first()[1]
    data_dir = Path(location.removeprefix("file:")) / "data"
    moved = tmp_path / "data"
    shutil.move(str(data_dir), str(moved))
    try:
        after = collect(SparkMeta(spark, "icetide"), known)
    finally:
        shutil.move(str(moved), str(data_dir))
    assert after.summary() | {"collected_at_ms": 0, "seconds_to_collect": 0, "reasons": []} == \
        before.summary() | {"collected_at_ms": 0, "seconds_to_collect": 0, "reasons": []}
    assert after.partition_rows() == before.partition_rows()


def test_history_and_prometheus(spark, kafka, lake, tmp_path, known) -> None:  # type: ignore[no-untyped-def]
    history = f"hl.{unique('history')}"
    cfg_dict = pipeline_dict(kafka, lake, tmp_path, "unused", f"hl.{unique('t')}",
                             health={"namespaces": ["hl"], "history_table": history,
                                     "overrides": {"hl.known_*": {"partition_files_warning": 5}}})
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump(cfg_dict))
    cfg = load_config(path)
    healths = collect_all(spark, cfg, [known], record=True)
    assert healths[0].tier != "healthy"  # the override applied
    rows = spark.sql(f"SELECT level, partition, data_files, tier FROM icetide.{history}").collect()
    assert sorted((r["level"], r["data_files"]) for r in rows) == [("partition", 3), ("partition", 7), ("table", 10)]

    registry = CollectorRegistry()
    collector = HealthCollector(max_partitions=1)
    registry.register(collector)
    collector.update(healths)
    port = free_port_pair()
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    t = f"icetide.{known}"
    assert samples[("icetide_table_data_files", (("table", t),))] == 10
    assert samples[("icetide_table_delete_files", (("table", t),))] == 2
    assert samples[("icetide_table_snapshots", (("table", t),))] == 12
    assert samples[("icetide_table_tier", (("table", t), ("tier", healths[0].tier)))] == 1
    partition_samples = [k for k in samples if k[0] == "icetide_partition_data_files"]
    assert partition_samples == [("icetide_partition_data_files", (("partition", '{"p":"a"}'), ("table", t)))]


def test_status_cli_json(spark, kafka, lake, tmp_path, known) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(pipeline_dict(kafka, lake, tmp_path, "unused", "hl.unused")))
    res = icetide_cli("status", "-c", str(path), "--namespace", "hl", "--output", "json", timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    data = {d["table"]: d for d in json.loads(res.stdout)}
    assert data[f"icetide.{known}"]["data_files"] == 10
    assert data[f"icetide.{known}"]["max_partition_files"] == 7
    res = icetide_cli("health", "-c", str(path), "hl.bad;name", timeout=120)
    assert res.returncode == 2 and "table name 'bad;name' is not allowed" in res.stderr
