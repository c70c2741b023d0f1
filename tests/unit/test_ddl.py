"""target.schema parsed without a JVM: what Spark accepts parses, typos are refused saying where."""

from __future__ import annotations

import pytest

from icetide.config.ddl import DdlError, parse_schema, transform_problem
from tests.fixtures.ddl_corpus import ACCEPTED


@pytest.mark.parametrize(("ddl", "names"), ACCEPTED)
def test_spark_schemas_parse(ddl: str, names: list[str]) -> None:
    assert [c.name for c in parse_schema(ddl)] == names


def test_columns_types_and_names() -> None:
    cols = parse_schema("`user-agent` STRING NOT NULL COMMENT 'ua', ts TIMESTAMP_NTZ, "
                        "n STRUCT<a: INT, b: ARRAY<MAP<STRING, DECIMAL(10,2)>>>")
    assert [c.name for c in cols] == ["user-agent", "ts", "n"]
    assert [c.type.kind for c in cols] == ["string", "timestamp_ntz", "struct"]
    assert (cols[0].nullable, cols[0].comment) == (False, "ua")
    inner = cols[2].type.fields
    assert [f.name for f in inner] == ["a", "b"]
    assert inner[1].type.kind == "array" and inner[1].type.items[0].kind == "map"
    assert [t.kind for t in inner[1].type.items[0].items] == ["string", "decimal"]


@pytest.mark.parametrize(("ddl", "message"), [
    ("id STRING, ts TIMESTAMPX", "unknown type 'TIMESTAMPX' at position 15 (near 'id STRING, ts TIMESTAMPX'); "
                                 "did you mean TIMESTAMP?"),
    ("id STRING,, n INT", "expected a column name, found ',' at position 11"),
    ("id STRING n INT", "expected ',' or the end of the schema, found 'n' at position 11"),
    ("s STRUCT<a INT", "expected ',' or '>', found the end at position 15"),
    ("m MAP<STRING>", "expected ',' between the MAP's key and value types, found '>' at position 13"),
    ("d DECIMAL(10,", "expected a number, found the end at position 14"),
    ("i INTERVAL DAY", "type INTERVAL at position 3: Iceberg has no interval type"),
    ("v VOID", "type VOID at position 3: Iceberg has no null type"),
    ("a INT, A STRING", "column 'A' is given twice"),
    ("a INT NOT", "expected NULL after NOT"),
    ("a INT COMMENT x", "expected a quoted comment"),
    ("  ", "the schema is empty"),
    ("a INT; DROP TABLE x", "unexpected ';' at position 6"),
])
def test_refused_with_where(ddl: str, message: str) -> None:
    with pytest.raises(DdlError) as e:
        parse_schema(ddl)
    assert message in str(e.value)


def test_transform_problems() -> None:
    have = {c.name: c.type for c in parse_schema("id STRING, event_time TIMESTAMP, n INT, d DATE")}
    assert transform_problem("days", "event_time", have, "the schema") is None
    assert transform_problem("hours", "d", have, "the schema") is not None
    assert "hours takes TIMESTAMP, TIMESTAMP_NTZ" in (transform_problem("hours", "n", have, "the schema") or "")
    missing = transform_problem("days", "evnt_time", have, "the schema") or ""
    assert "needs column 'evnt_time'" in missing and "did you mean 'event_time'?" in missing
    assert transform_problem("truncate", "id", have, "the schema") is None
    assert transform_problem("bucket", "n", have, "the schema") is None
