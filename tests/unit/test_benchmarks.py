"""Every benchmark entry point still resolves what it imports, lazy imports inside functions too, so
a helper moved in a refactor breaks this test, not a benchmark run months later (#32). Their real
runs need the stack; `tests/integration` runs the small ones."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for p in (REPO / "benchmarks").rglob("*.py") if p.name != "__init__.py")


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of every import statement in ``path``, at any depth."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
    return out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_import_of_a_benchmark_resolves(script: Path) -> None:
    missing = []
    for module, name in _imports(script):
        if not module.startswith(("icetide", "tests", "benchmarks")):
            continue  # third-party: pinned in pyproject
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{module}: {e}")
            continue
        if name is not None and name != "*" and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{script.relative_to(REPO)} imports what no longer exists: {missing}"


def test_the_benchmarks_are_found() -> None:
    assert len(SCRIPTS) >= 10 and any(p.parts[-2:] == ("fanout", "run.py") for p in SCRIPTS)


def test_avro_benchmark_encodes_the_wire_format_and_reports_ratios() -> None:
    """The Avro benchmark's no-JVM path: its records decode back, its report computes the ratios."""
    import io

    import fastavro
    from benchmarks.avro.run import SCHEMA, as_avro, events, markdown

    evs = events(3)
    values = as_avro(evs, 258)
    assert all(v[:5] == b"\x00\x00\x00\x01\x02" for v in values)
    back = fastavro.schemaless_reader(io.BytesIO(values[1][5:]), fastavro.parse_schema(SCHEMA), None)
    assert back["id"] == evs[1]["id"] and back["event_time"] == evs[1]["event_time"]
    from benchmarks.avro.run import schema, table_ddl

    wide = events(2, wide=7)
    back = fastavro.schemaless_reader(io.BytesIO(as_avro(wide, 258, 7)[1][5:]), fastavro.parse_schema(schema(7)), None)
    assert back == {**wide[1], "event_time": back["event_time"]} and len(back) == 13
    assert table_ddl(7).count(",") == 12 and table_ddl(7).endswith("w4 INT, w5 BIGINT, w6 DOUBLE")
    # --nested: a record (named once, referenced after), an array, a decimal, a date, an optional string
    nested = events(4, wide=22, nested=True)
    back = fastavro.schemaless_reader(io.BytesIO(as_avro(nested, 258, 22, True)[3][5:]),
                                      fastavro.parse_schema(schema(22, True)), None)
    assert back == {**nested[3], "event_time": back["event_time"]} and len(back) == 28
    assert back["w5"] == {"a": 3, "b": "p3"} and back["w15"] == {"a": 3, "b": "p3"} and back["w6"] == [3, 4, 3]
    assert str(back["w7"]) == "0.03" and back["w9"] is None and nested[1]["w9"] == "o1"
    assert schema(22, True)["fields"][6 + 15]["type"] == "bench.Part"
    assert ("w5 STRUCT<a: BIGINT, b: STRING>, w6 ARRAY<BIGINT>, w7 DECIMAL(12,2), w8 DATE, w9 STRING"
            in table_ddl(22, True))

    def res(system: str, eps: float) -> dict[str, object]:
        return {"system": system, "events_per_s": eps, "steady_events_per_s": eps * 1.2, "jvm_cpu_s_per_m_events": 9,
                "batches": 4, "data_files": 16, "rows": 10, "expected": 10, "processed": 10}

    machine = {"cpu": "x", "cores": 2, "memory_gib": 23, "os": "linux", "spark": "4.1.1", "spark_master": "local[2]",
               "iceberg": "1.11.0"}
    md = markdown({"machine": machine, "date": "2026-11-28", "events": 10, "event_bytes": {"json": 300, "avro": 200},
                   "results": [res("icetide JSON", 100.0), res("icetide Avro", 150.0),
                               res("vanilla from_avro", 300.0)]})
    assert "| icetide JSON | 100 | 1.50× |" in md and "| vanilla from_avro | 300 | 0.50× |" in md


def test_one_jvm_splits_scripts_and_their_arguments() -> None:
    from benchmarks.one_jvm import runs

    assert runs(["benchmarks.expiry.run", "--rounds", "1", "--", "benchmarks.manifests.run", "--", "--"]) == [
        ["benchmarks.expiry.run", "--rounds", "1"], ["benchmarks.manifests.run"]]
    assert runs([]) == []


def test_the_kafka_connect_sinks_figures_come_from_its_commits() -> None:
    """Window from the tasks running to the commit holding the last event; steady over the commits after
    the first; empty commits (the coordinator commits with nothing to add) are left out."""
    from types import SimpleNamespace

    from benchmarks.fanout.connect import figures

    def snap(t_s: float, added: int, total: int) -> SimpleNamespace:
        return SimpleNamespace(timestamp_ms=int(t_s * 1000), summary={
            "added-records": str(added), "total-records": str(total), "total-data-files": str(total // 100),
            "total-files-size": str(total * 10)})

    snaps = [snap(104, 400, 400), snap(107, 0, 400), snap(108, 300, 700), snap(112, 300, 1000)]
    r = figures(snaps, t0=100.0, cpu=5.0, expected=1000, commit_interval_s=4)
    assert (r["rows"], r["batches"], r["seconds"], r["events_per_s"]) == (1000, 3, 12.0, 83.3)
    assert r["steady_events_per_s"] == 75.0  # 600 rows from 104 s to 112 s
    assert (r["first_batch_s"], r["batch_s"], r["steady_batch_s"]) == (4.0, [4.0, 4.0], 4.0)
    assert (r["jvm_cpu_s_per_m_events"], r["data_files"], r["trigger"]) == (5000.0, 10, "commit every 4 s")


def test_the_kafka_connect_sink_runs_on_the_benchmarks_catalog_and_cadence() -> None:
    from pathlib import Path

    from benchmarks.fanout.connect import properties
    from benchmarks.fanout.run import cadence
    from benchmarks.ingest.run import config

    cfg = config("127.0.0.1:9092", "t", "bench.fo_capacity_kafka_connect", Path("/w"))
    worker, connector = properties(cfg, Path("/w"), "bench-x", 8083, 2.4)
    assert "value.converter=org.apache.kafka.connect.json.JsonConverter\n" in worker
    assert "listeners=http://127.0.0.1:8083\n" in worker
    assert "offset.flush.interval.ms=2400\n" in worker  # a drained task sees the commit request in time
    for line in ("topics=t", "iceberg.tables=bench.fo_capacity_kafka_connect", "iceberg.catalog=icetide",
                 "iceberg.catalog.uri=jdbc:sqlite:/w/catalog.db", "iceberg.control.commit.interval-ms=2400"):
        assert f"{line}\n" in connector
    runs = [{"regime": "capacity", "system": "vanilla-tuned", "steady_batch_s": 2.5}]
    assert (cadence(runs, "capacity"), cadence([], "capacity"), cadence(runs, "sustained")) == (2.5, 10.0, 10.0)
