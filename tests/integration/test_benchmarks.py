"""The benchmarks run end to end at a tiny size on the real stack, against the session's Kafka broker
(one JVM per benchmark: ``ICETIDE_BENCH_ONE_JVM``, see benchmarks.common.one_jvm), with their reports
and plots: each worker path of the fan-out (whose vanilla and single-table workers are the ingest
benchmark's), every system of the CDC benchmark, and the Spark-only benchmarks (all five in one
process, benchmarks.one_jvm). A helper that moves or a worker that breaks fails here, not in a
benchmark run months later (#32). The figures of such a tiny run mean nothing; only that every path
ran and every row landed. A fresh JVM per worker, as a measurement runs them, is the same code with
a subprocess around it (the `worker` entry points, checked in the unit tier's import test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _run(module: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "ICETIDE_BENCH_IDLE_S": "3", "ICETIDE_BENCH_ONE_JVM": "1"}
    proc = subprocess.run([sys.executable, "-m", module, *args, "--out", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    found = sorted(tmp_path.glob("*.json"))
    assert found, f"{module} wrote no results"
    result: dict[str, Any] = json.loads(found[0].read_text())
    assert (tmp_path / "results.md").read_text().startswith("# ")
    assert any(p.suffix == ".png" and p.stat().st_size > 10_000 for p in tmp_path.iterdir())
    return result


def test_fanout_benchmark_runs_each_worker(kafka, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One system per worker path: the vanilla worker (shared with the ingest benchmark, whose report is
    rendered in the unit tier; with icetide's table properties and small dictionaries), icetide's
    single-table run with the in-task decoder and with the expression path, the fan-out worker, and
    Apache Iceberg's Kafka Connect sink (its jars from Maven Central on first use: ~15 s; its JVM, a
    10 s commit interval and its tasks' first rebalance: ~30 s; ~50 s more in CI)."""
    # icetide-nodict and -smalldict are icetide with a table property more: their path is icetide's
    systems = ["vanilla-by-route", "vanilla-tuned-smalldict", "icetide", "icetide-expressions", "icetide-fanout",
               "icetide-nometa", "kafka-connect"]
    r = _run("benchmarks.fanout.run", tmp_path, "--events", "3000", "--tables", "3", "--regimes", "capacity",
             "--systems", ",".join(systems), "--bootstrap", kafka.bootstrap, "--read")
    assert [x["system"] for x in r["results"]] == systems
    for x in r["results"]:
        assert x["rows"] == x["expected"] == 3000, x
    assert next(x for x in r["results"] if x["system"] == "icetide-fanout")["tables"] == 3
    assert "| target | measured | target | met |" in (tmp_path / "results.md").read_text()
    # --read: every one-table system's files, read back (~20 s: one more Spark session)
    assert sorted(r["reads"]) == sorted(s for s in systems if s != "icetide-fanout")
    for system, x in r["reads"].items():
        assert x["data_files"] > 0 and x["data_bytes"] > 0 and x["filter_s"] > 0 and x["scan_s"] > 0, (system, x)
    # a small dictionary cap keeps the dictionary of a column of 3 values, in every chunk
    assert r["reads"]["vanilla-tuned-smalldict"]["dictionary_share"]["event_type"] == 1.0
    assert "## What readers pay" in (tmp_path / "results.md").read_text()


def test_cdc_benchmark_runs_every_system(kafka, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from benchmarks.cdc.run import SYSTEMS

    r = _run("benchmarks.cdc.run", tmp_path, "--keys", "300", "--changes", "2000", "--rows", "2000",
             "--read-steps", "1", "--bootstrap", kafka.bootstrap)
    by = {x["system"]: x for x in r["throughput"]}
    assert list(by) == [s for s, _ in SYSTEMS]
    for system in ("vanilla-merge-ordered", "icetide-mor", "icetide-cow"):
        assert by[system]["state_ok"] is True, (system, by[system]["stale_or_wrong"])
    assert [x["commits"] for x in r["reads"]["merge-on-read"]] == [0, 1]


def test_avro_benchmark_runs_every_system_on_the_nested_schema(kafka, registry, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every system of the Avro benchmark, on its ``--nested`` schema (a nested record, an array, a
    decimal, a date, an optional string), against the session's broker and registry (~70 s; the
    registry is this worker's session one: ~20 s more when test_avro.py runs on another worker)."""
    from benchmarks.avro.run import SYSTEMS

    env = {**os.environ, "ICETIDE_BENCH_IDLE_S": "3", "ICETIDE_BENCH_ONE_JVM": "1"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.avro.run", "--events", "2000", "--wide", "12",
                           "--nested", "--systems", ",".join(SYSTEMS), "--bootstrap", kafka.bootstrap,
                           "--registry", registry.url, "--out", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    r = json.loads((tmp_path / "results.json").read_text())
    assert [x["system"] for x in r["results"]] == list(SYSTEMS) and r["fields"] == 18 and r["nested"] is True
    for x in r["results"]:
        assert x["rows"] == x["expected"] == 2000, x
    assert "| vanilla from_avro tuned |" in (tmp_path / "results.md").read_text()
    # #39: the run's first batch learned the subject's latest schema from the registry, created the
    # table from it and took the one pass (with the hash distribution: shuffled by day first)
    for system in ("icetide Avro", "icetide Avro hash"):
        first = next(x for x in r["results"] if x["system"] == system)["batch_phases"][0]
        assert {"learn_first", "one_pass_job"} <= set(first["timings"]) and "admit" not in first["timings"], first


def test_spark_only_benchmarks_run_at_a_tiny_size(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The benchmarks that need Spark but no broker, one after another in one process (one JVM)."""
    runs = {
        "expiry": ("benchmarks.expiry.run", "--rounds", "1", "--commits", "22", "--out", str(tmp_path / "expiry")),
        "manifests": ("benchmarks.manifests.run", "--entries", "0", "--commits", "2",
                      "--out", str(tmp_path / "manifests")),
        "cdc_deletes": ("benchmarks.cdc_deletes.run", "--keys", "2000", "--batch", "20", "--cycles", "1",
                        "--per-cycle", "2", "--seed", "7", "--out", str(tmp_path / "cdc_deletes")),
        "parse_costs": ("benchmarks.fanout.parse_costs", "--events", "2000", "--tables", "3",
                        "--out", str(tmp_path / "parse_costs" / "parse_costs.md")),
        "collect_cost": ("benchmarks.health.collect_cost", "--commits", "4", "--files-per-commit", "2",
                         "--out", str(tmp_path / "collect_cost")),
        "parse_once": ("benchmarks.cdc.parse_once", "--changes", "3000", "--keys", "500", "--repeats", "1",
                       "--out", str(tmp_path / "parse_once")),
    }
    (tmp_path / "parse_costs").mkdir()
    argv: list[str] = []
    for module, *args in runs.values():
        argv += [*(["--"] if argv else []), module, *args]
    proc = subprocess.run([sys.executable, "-m", "benchmarks.one_jvm", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("== ")] == \
        [m for m, *_ in runs.values()]
    for name in runs:
        written = [p for p in (tmp_path / name).iterdir() if p.suffix == ".md"]
        assert written and written[0].read_text().startswith("# "), name
