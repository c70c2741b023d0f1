"""A partition, sort or key column the configured schema lacks is a config error naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from icetide.config import load_config
from tests.fixtures.configs import BASE, errors_for, write

SCHEMA = "id STRING, event_time TIMESTAMP, n INT, d DATE"


def _target(**kw: Any) -> dict[str, Any]:
    return {**BASE, "target": {"table": "raw.orders", "schema": SCHEMA, **kw}}


@pytest.mark.parametrize(("target", "line"), [
    ({"partition_by": ["days(evnt_time)"]},
     "p.yaml: target.partition_by: days(evnt_time) needs column 'evnt_time', which the schema does not have "
     "(did you mean 'event_time'?); fix the column name or add the column to the schema"),
    ({"partition_by": ["hours(d)"]},
     "p.yaml: target.partition_by: hours(d) cannot take column 'd' of type DATE: hours takes TIMESTAMP, "
     "TIMESTAMP_NTZ; partition by another column or transform"),
    ({"partition_by": ["truncate(4, event_time)"]},
     "p.yaml: target.partition_by: truncate(4, event_time) cannot take column 'event_time' of type TIMESTAMP"),
    ({"sort_by": ["nn"]}, "p.yaml: target.sort_by: column 'nn' is not in the schema (did you mean 'n'?)"),
    ({"cdc": {"primary_key": ["ids"], "ordering": "n"}},
     "p.yaml: target.cdc.primary_key: column 'ids' is not in the schema (did you mean 'id'?)"),
    ({"tables": {"raw.*": {"partition_by": ["bucket(8, user)"]}}},
     "p.yaml: target.tables.raw.*.partition_by: bucket(8, user) needs column 'user'"),
    ({"schema": "id STRING, ts TIMESTAMPX"},
     "p.yaml: target.schema: not a Spark DDL schema: unknown type 'TIMESTAMPX' at position 15"),
    ({"schema": "id STRING, _CDC_rn BIGINT"},
     "p.yaml: target.schema: column '_CDC_rn': names starting with _icetide_ or _cdc_ (any case) are icetide's own; "
     "rename the column"),
    ({"tables": {"raw.x": {"schema": "id STRING, _icetide_x INT"}}},
     "p.yaml: target.tables: override 'raw.x': schema: column '_icetide_x': names starting with _icetide_ or _cdc_"),
    ({"tables": {"raw.x": {"schema": "id STRIN"}}},
     "p.yaml: target.tables: override 'raw.x': schema: not a Spark DDL schema: unknown type 'STRIN'"),
])
def test_column_mistakes_are_refused(tmp_path: Path, target: dict[str, Any], line: str) -> None:
    err = errors_for(tmp_path, _target(**target))
    assert err.startswith(line), err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("target", [
    {"partition_by": ["days(event_time)", "bucket(16, id)", "truncate(2, n)", "d", "hours(_kafka_timestamp)"],
     "sort_by": ["n", "_kafka_offset"]},
    {"cdc": {"primary_key": ["id"], "ordering": "version"}},  # read from the record, kept as _cdc_ordering
    {"cdc": {"primary_key": ["id"], "ordering": "source.lsn", "format": "debezium"}},  # the envelope's field
    {"schema": None, "partition_by": ["days(anything)"]},  # no schema: the records decide, checked at create
])
def test_columns_that_exist_pass(tmp_path: Path, target: dict[str, Any]) -> None:
    load_config(write(tmp_path, _target(**target)))


def test_kafka_columns_only_when_added(tmp_path: Path) -> None:
    data = _target(partition_by=["days(_kafka_timestamp)"])
    data["target"]["kafka_metadata_columns"] = False
    assert "target.partition_by: days(_kafka_timestamp) needs column '_kafka_timestamp'" in errors_for(tmp_path, data)
