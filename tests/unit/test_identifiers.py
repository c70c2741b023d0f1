"""Identifiers from config or records can never reach SQL, a path or another namespace."""

from __future__ import annotations

import pytest

from icetide.errors import IdentifierError
from icetide.identifiers import validate_name, validate_pipeline, validate_table, validate_topic

HOSTILE = [
    "../x", "a.b.c.d", "`t`", "'t'", '"t"', "t; DROP TABLE x", "x" * 10_000,
    "ｅvents", "evеnts",  # fullwidth e, Cyrillic e
    "", " ", "t\n", "t\x00", "a/b", "a\\b", "drop", "SELECT", "Events",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_table_names_are_rejected(value: str) -> None:
    with pytest.raises(IdentifierError):
        validate_table(f"raw.{value}")
    with pytest.raises(IdentifierError):
        validate_name(value)


def test_error_message_says_what_is_allowed_and_truncates() -> None:
    with pytest.raises(IdentifierError) as e:
        validate_name("x" * 10_000, "table name")
    assert "use 1-128 characters of a-z, 0-9 and _" in str(e.value)
    assert len(str(e.value)) < 300


def test_valid_names() -> None:
    assert validate_table("raw.orders_v2") == ("raw", "orders_v2")
    assert validate_pipeline("orders-ingest-1") == "orders-ingest-1"
    assert validate_topic("orders.v1-x_y") == "orders.v1-x_y"
    for bad in ("Orders", "-x", "x" * 64, "a b"):
        with pytest.raises(IdentifierError):
            validate_pipeline(bad)
    with pytest.raises(IdentifierError):
        validate_topic("a/b")


def test_kafka_secrets_are_redacted_for_logs() -> None:
    from icetide.ingest.source import redacted

    opts = {"security.protocol": "SASL_SSL", "sasl.jaas.config": "... password=\"hunter2\";",
            "ssl.key.password": "k3y", "ssl.truststore.location": "/etc/ts.jks"}
    shown = redacted(opts)
    assert "hunter2" not in str(shown) and "k3y" not in str(shown)
    assert shown["security.protocol"] == "SASL_SSL" and shown["ssl.truststore.location"] == "/etc/ts.jks"


def test_table_ref_parses_both_forms_and_renders_each_once() -> None:
    from icetide.identifiers import TableRef

    a = TableRef.parse("raw.orders", "icetide")
    b = TableRef.parse("icetide.raw.orders", "icetide")
    assert a == b and (a.short, a.qualified, str(a)) == ("raw.orders", "icetide.raw.orders", "icetide.raw.orders")
    for bad in ("other.raw.orders", "a.b.c.d", "orders", "raw.Orders", "raw.x;drop", "../x.y"):
        with pytest.raises(IdentifierError):
            TableRef.parse(bad, "icetide")
    with pytest.raises(IdentifierError):
        TableRef("icetide", "raw", "select")  # a reserved word
