"""Bad config through the CLI: one line naming the key, exit code 2 (as a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from icetide.config.ddl import parse_schema
from icetide.demo.events import create_topic
from icetide.services.kafka import LocalKafka
from tests.fixtures.configs import BASE, write
from tests.fixtures.ddl_corpus import ACCEPTED
from tests.fixtures.records import dumps, send
from tests.fixtures.stack import icetide_cli, pipeline_dict, unique


def test_cli_unreachable_kafka_is_one_line_and_exit_2(tmp_path: Path) -> None:
    data = {**BASE, "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ["orders"]}}
    res = icetide_cli("check", "-c", str(write(tmp_path, data)), timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("icetide: source.bootstrap_servers: cannot reach Kafka at 127.0.0.1:1 ("), res.stderr


def test_cli_unreachable_rest_catalog(tmp_path: Path) -> None:
    data = {**BASE, "catalog": {"type": "rest", "uri": "http://127.0.0.1:1/api"}}
    res = icetide_cli("run", "-c", str(write(tmp_path, data)), timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].startswith(
        "icetide: catalog.uri: cannot reach the REST catalog at http://127.0.0.1:1/api ("
    ), res.stderr


def test_cli_config_error_exit_2(tmp_path: Path) -> None:
    res = icetide_cli("run", "-c", str(write(tmp_path, {**BASE, "sink": 1})), timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("icetide: ") and "unknown key 'sink'" in res.stderr


def test_cli_missing_file(tmp_path: Path) -> None:
    res = icetide_cli("run", "-c", str(tmp_path / "nope.yaml"), timeout=60)
    assert res.returncode == 2
    missing = tmp_path / "nope.yaml"
    assert res.stderr.strip() == f"icetide: {missing}: config file not found (pass the path with -c/--config)"




# --- the preflight (issue #33): each mistake one line naming the key, exit 2, before Spark starts ---

def _last(res: subprocess.CompletedProcess[str]) -> str:
    return res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ""


def test_partition_typo_refused_by_check_and_by_run_before_spark(tmp_path: Path) -> None:
    data = {**BASE, "target": {"table": "raw.orders", "schema": "id STRING, event_time TIMESTAMP",
                               "partition_by": ["days(evnt_time)"]}}
    line = ("icetide: config: target.partition_by: days(evnt_time) needs column 'evnt_time', which the schema "
            "does not have (did you mean 'event_time'?)")
    for command in ("check", "run"):
        res = icetide_cli(command, "-c", str(write(tmp_path, data)), timeout=60,
                          env={**os.environ, "ICETIDE_HOME": str(tmp_path / "home")})
        assert res.returncode == 2, res.stderr
        assert _last(res).replace(str(tmp_path / "p.yaml"), "config").startswith(line), res.stderr
        assert "Traceback" not in res.stderr and "py4j" not in res.stderr
    assert not (tmp_path / "home" / "logs" / "spark.log").exists()  # Spark never started


def test_schema_typo_quotes_the_position(tmp_path: Path) -> None:
    data = {**BASE, "target": {"table": "raw.orders", "schema": "id STRING, ts TIMESTAMPX"}}
    res = icetide_cli("check", "-c", str(write(tmp_path, data)), timeout=60)
    assert res.returncode == 2
    assert ": target.schema: not a Spark DDL schema: unknown type 'TIMESTAMPX' at position 15" in _last(res)


def test_sqlite_catalog_in_a_missing_folder_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    data = {**BASE, "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{missing}/catalog.db",
                                "warehouse": str(tmp_path / "nonexistent" / "wh")}}
    cfg = str(write(tmp_path, data))
    for command in (["check"], ["status"], ["health", "raw.orders"], ["run"]):
        res = icetide_cli(*command, "-c", cfg, timeout=60)
        assert res.returncode == 2, (command, res.stderr)
        assert _last(res) == (f"icetide: catalog.uri: the folder {missing} of the SQLite catalog does not exist; "
                              f"create it (mkdir -p {missing}) or fix the path"), res.stderr
    assert not (tmp_path / "nonexistent").exists()


def test_read_commands_never_create_a_catalog(tmp_path: Path) -> None:
    data = {**BASE, "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{tmp_path}/catalog.db",
                                "warehouse": str(tmp_path / "wh")}}
    cfg = str(write(tmp_path, data))
    for command in (["status"], ["health", "raw.orders"], ["plan", "-t", "raw.orders"], ["offsets"]):
        res = icetide_cli(*command, "-c", cfg, timeout=60)
        assert res.returncode == 2, (command, res.stderr)
        assert _last(res).startswith(f"icetide: catalog.uri: no catalog at {tmp_path}/catalog.db: nothing has run "
                                     "with this config yet"), (command, res.stderr)
    assert not (tmp_path / "catalog.db").exists() and not (tmp_path / "wh").exists()


def test_missing_jdbc_driver_is_named_with_the_fix(tmp_path: Path) -> None:
    data = {**BASE, "catalog": {"type": "jdbc", "uri": "jdbc:postgresql://127.0.0.1:1/lake",
                                "warehouse": str(tmp_path / "wh")}}
    res = icetide_cli("check", "-c", str(write(tmp_path, data)), timeout=60)
    assert res.returncode == 2
    assert _last(res) == ("icetide: catalog.uri: jdbc:postgresql needs the PostgreSQL JDBC driver "
                          "(org.postgresql.Driver), which is not on Spark's classpath; add it under spark.conf: "
                          "spark.jars.packages: 'org.postgresql:postgresql:<version>' (fetched from Maven Central), "
                          "or spark.jars: /path/to/the-driver.jar"), res.stderr


def test_missing_topic_refused_by_check_and_run_and_listed_by_check_json(tmp_path: Path, kafka: LocalKafka) -> None:
    topic = unique("pf-orders")
    create_topic(kafka.bootstrap, topic, 2)
    data = {**BASE, "source": {"bootstrap_servers": kafka.bootstrap, "topics": [topic, topic + "x"]},
            "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{tmp_path}/catalog.db", "warehouse": str(tmp_path / "wh")}}
    cfg = str(write(tmp_path, data))
    line = (f"icetide: source.topics: Kafka at {kafka.bootstrap} has no topic '{topic}x' (did you mean '{topic}'?); "
            "create it (kafka-topics.sh --create --topic NAME) or fix the name")
    for command in ("check", "run"):
        res = icetide_cli(command, "-c", cfg, *(["--until-idle"] if command == "run" else []), timeout=120)
        assert res.returncode == 2, res.stderr
        assert _last(res) == line, res.stderr
    res = icetide_cli("check", "-c", cfg, "-o", "json", timeout=120)
    assert res.returncode == 2
    out = json.loads(res.stdout)
    assert out["valid"] is False
    assert {c["name"]: c["outcome"] for c in out["checks"]} == {
        "config": "ok", "catalog": "ok", "kafka": "ok", "topics": "error"}
    assert not (tmp_path / "catalog.db").exists()  # check created nothing

    data["source"] = {"bootstrap_servers": kafka.bootstrap, "topic_pattern": unique("pf-none") + ".*"}
    res = icetide_cli("check", "-c", str(write(tmp_path, data)), timeout=120)
    assert res.returncode == 0, res.stderr
    assert "no topic on Kafka matches" in res.stdout and "the run will wait for one" in res.stdout


@pytest.mark.parametrize(("ddl", "names"), ACCEPTED)
def test_the_no_jvm_schema_parser_agrees_with_spark(spark, ddl: str, names: list[str]) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.types import StructType, _parse_datatype_string

    parsed = _parse_datatype_string(ddl)
    assert isinstance(parsed, StructType)
    assert [f.name for f in parsed.fields] == names == [c.name for c in parse_schema(ddl)]
    for field, column in zip(parsed.fields, parse_schema(ddl), strict=True):
        assert field.nullable == column.nullable, ddl


def test_run_until_idle_exits_non_zero_when_a_config_mistake_dead_letters_everything(
        tmp_path: Path, kafka: LocalKafka, lake: Path) -> None:
    """Two config mistakes in one routed run: a partition column no record has (no schema given),
    and a schema no record matches (every amount is text); a third table lands and is not blamed."""
    topic, ns = unique("pf-typo"), unique("pf")
    records = [dumps({"kind": kind, "id": str(i), "event_time": "2026-11-28T10:00:00Z",
                      "amount": "lots" if kind == "strict" else i})
               for i in range(600) for kind in (["typo", "strict", "fine"][i % 3],)]
    n = send(kafka.bootstrap, topic, records, partitions=2)
    data = pipeline_dict(kafka, lake, tmp_path, topic, f"{ns}.events", target={
        "route": {"by": "field", "name": "kind", "table": f"{ns}.{{value}}"},
        "tables": {f"{ns}.typo": {"partition_by": ["days(evnt_time)"]},
                   f"{ns}.strict": {"schema": "kind STRING, id STRING, event_time TIMESTAMP, amount DOUBLE"}}})
    res = icetide_cli("run", "-c", str(write(tmp_path, data)), "--until-idle", timeout=300)
    assert res.returncode == 2, res.stderr[-3000:]
    assert _last(res).startswith(
        f"icetide: target.schema (or target.tables): no record for {ns}.strict matches it: all 200 records of "
        "batch 0 were dead-lettered as type_mismatch; fix the schema (or the producers) (and 1 more table); "
        f"nothing landed in {ns}.strict: its records are in the dead-letter table"), res.stderr[-3000:]
    assert (f"nothing can land in {ns}.typo, every record of it was dead-lettered: target.tables.partition_by: "
            f"days(evnt_time) needs column 'evnt_time', which the records for {ns}.typo do not have") in res.stderr
    assert f"nothing can land in {ns}.strict" in res.stderr and f"nothing can land in {ns}.fine" not in res.stderr
    assert res.stderr.count('"event": "config_mistake"') == 2
    assert "Using incubator modules" not in res.stderr  # the JVM's start-up noise is left off the terminal
    assert f"{n} records, 200 written, 400 dead-lettered" in res.stdout, res.stdout


def test_names_that_do_not_exist_are_one_line_and_exit_2_and_qualified_names_are_accepted(
        spark, tmp_path: Path, kafka: LocalKafka, lake: Path) -> None:  # type: ignore[no-untyped-def]
    ns = unique("pfn")
    spark.sql(f"CREATE TABLE icetide.{ns}.orders (id STRING) USING iceberg")
    cfg = str(write(tmp_path, pipeline_dict(kafka, lake, tmp_path, "unused", f"{ns}.orders")))
    cases = {
        ("health", f"{ns}.nope"): f"icetide: table {ns}.nope does not exist in catalog icetide (1 table in {ns})",
        ("health", f"{ns}.ordrs"): f"icetide: table {ns}.ordrs does not exist in catalog icetide (did you mean "
                                   f"'{ns}.orders'?) (1 table in {ns})",
        ("plan", "-t", f"{ns}.nope"): f"icetide: table {ns}.nope does not exist in catalog icetide (1 table in {ns})",
        ("status", "-n", f"{ns}x"): f"icetide: namespace '{ns}x' does not exist in catalog icetide (did you mean "
                                    f"'{ns}'?)",
    }
    for args, line in cases.items():
        res = icetide_cli(*args, "-c", cfg, timeout=60)
        assert res.returncode == 2, (args, res.stderr)
        assert _last(res).startswith(line), (args, res.stderr)
        assert "Traceback" not in res.stderr
    for name in (f"{ns}.orders", f"icetide.{ns}.orders"):  # as -o json prints it, or catalog-qualified
        res = icetide_cli("health", name, "-c", cfg, "-o", "json", timeout=60)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["table"].endswith(f"{ns}.orders")
