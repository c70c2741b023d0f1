"""Bad config fails at start-up with one line naming the key to fix (exact lines asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from icetide.config import load_config
from icetide.errors import ConfigError
from tests.fixtures.configs import BASE, errors_for, write


def test_valid_minimal_config_gets_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, BASE))
    assert cfg.catalog.type == "jdbc"
    assert cfg.stream.trigger_seconds() == 60
    assert cfg.target.table_properties()["write.parquet.compression-codec"] == "zstd"
    assert cfg.checkpoint_dir() == str(tmp_path / ".icetide/checkpoints/orders")


def test_unknown_key(tmp_path: Path) -> None:
    data = {**BASE, "source": {**BASE["source"], "bootstrap_server": "x:1"}}
    assert errors_for(tmp_path, data) == (
        "p.yaml: unknown key 'source.bootstrap_server' (allowed: adopt_offsets_from, bootstrap_servers, format, "
        "key_format, max_depth, max_fields, "
        "max_offsets_per_trigger, max_value_bytes, min_partitions, on_data_loss, on_topic_recreated, options, "
        "records_per_task, schema_registry, starting_offsets, topic_formats, topic_pattern, topics)"
    )


def test_unknown_top_level_section(tmp_path: Path) -> None:
    assert errors_for(tmp_path, {**BASE, "sink": {}}).startswith("p.yaml: unknown key 'sink' (allowed: catalog,")


def test_wrong_type(tmp_path: Path) -> None:
    data = {**BASE, "source": {**BASE["source"], "max_offsets_per_trigger": "lots"}}
    assert errors_for(tmp_path, data) == (
        "p.yaml: source.max_offsets_per_trigger: Input should be a valid integer, unable to parse string "
        "as an integer (got 'lots')"
    )


def test_missing_key(tmp_path: Path) -> None:
    data = {k: v for k, v in BASE.items() if k != "target"}
    assert errors_for(tmp_path, data) == "p.yaml: target: required key is missing"


def test_bad_interval_and_transform(tmp_path: Path) -> None:
    data = {**BASE, "stream": {"trigger_interval": "fast"},
            "target": {"table": "raw.orders", "partition_by": ["days(ts"]}}
    assert errors_for(tmp_path, data).splitlines() == [
        "p.yaml: target.partition_by: 'days(ts' is not a partition transform; use a column name, "
        "years|months|days|hours(col), bucket(N, col) or truncate(N, col)",
        "p.yaml: stream.trigger_interval: 'fast' is not an interval; write e.g. '10 seconds', '500 ms', "
        "'2 minutes' (got 'fast')",
    ]


def test_bad_table_identifier(tmp_path: Path) -> None:
    data = {**BASE, "target": {"table": "raw.orders; DROP TABLE x"}}
    assert errors_for(tmp_path, data) == (
        "p.yaml: target.table: table name 'orders; DROP TABLE x' is not allowed: use 1-128 characters of "
        "a-z, 0-9 and _, starting with a letter or _ (got 'raw.orders; DROP TABLE x')"
    )


def test_topics_xor_pattern(tmp_path: Path) -> None:
    data = {**BASE, "source": {"bootstrap_servers": "h:1", "topics": ["a"], "topic_pattern": "a.*"}}
    assert errors_for(tmp_path, data) == "p.yaml: source: set exactly one of 'topics' or 'topic_pattern'"


def test_env_override_and_interpolation(tmp_path: Path) -> None:
    data = {**BASE, "catalog": {"type": "rest", "uri": "http://127.0.0.1:1", "token": "${TOK}"}}
    env = {"TOK": "s3cret", "ICETIDE__SOURCE__MAX_OFFSETS_PER_TRIGGER": "5000",
           "ICETIDE__STREAM__TRIGGER_INTERVAL": "5 seconds"}
    cfg = load_config(write(tmp_path, data), env=env)
    assert cfg.source.max_offsets_per_trigger == 5000
    assert cfg.stream.trigger_seconds() == 5
    assert cfg.catalog.token is not None and cfg.catalog.token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(cfg)


def test_missing_env_var_names_it(tmp_path: Path) -> None:
    data = {**BASE, "catalog": {"type": "rest", "uri": "http://h:1", "token": "${NOPE_TOKEN}"}}
    with pytest.raises(ConfigError, match=r"environment variable NOPE_TOKEN is not set"):
        load_config(write(tmp_path, data), env={})


def test_route_template_and_target_errors_name_the_key(tmp_path: Path) -> None:
    route = {"by": "field", "name": "kind", "table": "events.{kind}"}
    assert load_config(write(tmp_path, {**BASE, "target": {"route": route}})).target.namespaces() == ["events"]
    cases = [
        ({"route": {**route, "table": "{kind}.x"}},
         "p.yaml: target.route: table template must have a placeholder in the table name, e.g. 'raw.{topic}'"),
        ({"route": {**route, "table": "{kind}.t_{kind}"}},
         "p.yaml: target.route: the template's namespace has a placeholder: list the allowed 'namespaces'"),
        ({"route": {**route, "table": "events.{user}"}},
         "p.yaml: target.route: table template placeholder {user} is unknown; use one of {kind}, {topic}, {value}"),
        ({"route": {**route, "table": "ev ents.{kind}"}},
         "p.yaml: target.route: table 'ev ents.{kind}' is not a template like 'raw.{topic}' or 'events.{value}' "
         "(namespace.table of a-z 0-9 _ and {placeholders})"),
        ({"route": {"by": "header", "table": "events.{value}"}},
         "p.yaml: target.route: by: header needs 'name': the header that holds the routing value"),
        ({"table": "raw.orders", "route": route},
         "p.yaml: target: set exactly one of 'table' (one table) or 'route' (tables chosen per record)"),
        ({"table": "raw.orders", "cdc": {"primary_key": [], "ordering": "v"}},
         "p.yaml: target.cdc.primary_key: list at least one key column"),
        ({"table": "raw.orders", "tables": {"raw.*": {"partition_by": ["days(ts"], "colour": 1}}},
         "p.yaml: target.tables: override 'raw.*': partition_by: 'days(ts' is not a partition transform; use a "
         "column name, years|months|days|hours(col), bucket(N, col) or truncate(N, col); colour: unknown key"),
    ]
    for target, line in cases:
        assert errors_for(tmp_path, {**BASE, "target": target}) == line, target


def test_avro_config_errors_name_the_key_and_the_fix(tmp_path: Path) -> None:
    avro = {**BASE["source"], "format": "avro"}
    assert "Avro needs schema_registry" in errors_for(tmp_path, {**BASE, "source": avro})
    bad_url = {**avro, "schema_registry": {"url": "registry:8081"}}
    assert "source.schema_registry.url" in errors_for(tmp_path, {**BASE, "source": bad_url})
    in_url = {**avro, "schema_registry": {"url": "https://alice:s3cr3t-pw@registry:8081"}}
    msg = errors_for(tmp_path, {**BASE, "source": in_url})
    assert "source.schema_registry.url" in msg and "basic_auth_user_info" in msg and "s3cr3t-pw" not in msg
    by_name = {**BASE, "target": {"route": {"by": "record_name", "table": "raw.{value}"}}}
    assert "record_name needs Avro values" in errors_for(tmp_path, by_name)
    mixed = {**BASE["source"], "topic_formats": {"orders-avro.*": "avro"},
             "schema_registry": {"url": "http://r:8081"}}
    cdc = {**BASE, "source": mixed, "target": {"table": "raw.orders", "cdc": {"primary_key": ["id"],
                                                                              "ordering": "v"}}}
    assert "a CDC pipeline reads one format" in errors_for(tmp_path, cdc)


def test_json_schema_config_errors_name_the_key_and_the_fix(tmp_path: Path) -> None:
    js = {**BASE["source"], "format": "json_schema"}
    assert "JSON Schema needs schema_registry" in errors_for(tmp_path, {**BASE, "source": js})
    with_registry = {**js, "schema_registry": {"url": "http://r:8081"}}
    cdc = {**BASE, "source": with_registry, "target": {"table": "raw.orders", "cdc": {"primary_key": ["id"],
                                                                                     "ordering": "v"}}}
    assert "target.cdc: changes in JSON Schema values are not read yet" in errors_for(tmp_path, cdc)
    cfg = load_config(write(tmp_path, {**BASE, "source": {**with_registry, "topic_formats": {"legacy": "json"}}}))
    assert cfg.source.formats() == {"json_schema", "json"} and cfg.source.format_of("legacy") == "json"


def test_topic_formats_pick_per_topic_with_a_default(tmp_path: Path) -> None:
    src = {**BASE["source"], "topic_formats": {"orders-avro.*": "avro", "legacy": "json"},
           "format": "avro", "schema_registry": {"url": "http://r:8081/apis/ccompat/v7/",
                                                 "basic_auth_user_info": "u:p4ssw0rd"}}
    cfg = load_config(write(tmp_path, {**BASE, "source": src}))
    assert cfg.source.format_of("orders-avro-eu") == "avro"
    assert cfg.source.format_of("legacy") == "json"
    assert cfg.source.format_of("other") == "avro"
    assert cfg.source.formats() == {"json", "avro"}
    assert cfg.source.schema_registry is not None and cfg.source.schema_registry.url == "http://r:8081/apis/ccompat/v7"
    assert "p4ssw0rd" not in repr(cfg.source.schema_registry)
