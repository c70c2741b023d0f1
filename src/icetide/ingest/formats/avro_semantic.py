"""Kafka Connect and Debezium semantic types, and the schema ``from_avro`` decodes with. Pure: no JVM.

Connect's Avro converters (Confluent's, Apicurio's) write a value's meaning beside its Avro type, in
``connect.name``: ``{"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}`` is a
timestamp, not a number. :func:`decode_schema` rewrites a writer schema into the one Spark's
``from_avro`` decodes with, changing only what Avro ignores when it reads bytes (logical types and
a decimal's precision) and dropping what a record decoded with its own writer schema never reads
(defaults), so every record decodes exactly as its writer wrote it:

- defaults are dropped: registries accept defaults Avro's strict parser refuses (a ``string``
  defaulting to null), and Spark parses ``from_avro``'s schema leniently on the driver but Avro
  parses it strictly again when a task deserializes it, failing the whole job;

- a decimal wider than 38 digits (Confluent writes a Connect ``Decimal`` without
  ``connect.decimal.precision`` as precision 64) is read as ``decimal(38, scale)``; a value that
  does not fit fails to decode, and only its record is a dead letter (``undecodable``);
- with ``semantic`` (``source.schema_registry.semantic_types: convert``, the default) a Connect or
  Debezium name gets the Avro logical type it means (:data:`LOGICAL`), and a
  ``VariableScaleDecimal``'s unscaled bytes are read as ``decimal(38, 0)``.

What no logical type expresses is converted after decoding (:data:`CONVERTED`, applied by
:mod:`.avro_rows`): ``NanoTimestamp`` (epoch nanoseconds → timestamp without zone, to the
microsecond), ``ZonedTimestamp`` (ISO-8601 text → timestamp with zone), ``VariableScaleDecimal``
(→ its exact decimal text: the scale differs per value, so no decimal column can hold it).
"""

from __future__ import annotations

import copy
from typing import Any

DBZ, CONNECT = "io.debezium.time.", "org.apache.kafka.connect.data."
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
#: (Avro type, connect.name) → the logical type it means (``time-*``: see :mod:`.avro_types`, an int/long column)
LOGICAL: dict[tuple[str, str], str] = {
    ("int", DBZ + "Date"): "date", ("int", CONNECT + "Date"): "date",
    ("int", DBZ + "Time"): "time-millis", ("int", CONNECT + "Time"): "time-millis",
    ("long", DBZ + "MicroTime"): "time-micros",
    ("long", DBZ + "Timestamp"): "local-timestamp-millis",
    ("long", DBZ + "MicroTimestamp"): "local-timestamp-micros",
    ("long", CONNECT + "Timestamp"): "timestamp-millis",
}
#: (Avro type, connect.name) → the conversion after decoding (see the module docstring)
CONVERTED: dict[tuple[str, str], str] = {
    ("long", DBZ + "NanoTimestamp"): "nanos_ntz",
    ("string", DBZ + "ZonedTimestamp"): "zoned",
    ("record", VARIABLE_DECIMAL): "variable_decimal",
}
#: connect.name → the column comment that says what the raw value is
NOTES: dict[str, str] = {
    DBZ + "NanoTime": "io.debezium.time.NanoTime: nanoseconds after midnight",
    DBZ + "ZonedTime": "io.debezium.time.ZonedTime: a time of day with its offset (ISO-8601)",
    VARIABLE_DECIMAL: "io.debezium.data.VariableScaleDecimal: the exact decimal as text",
    DBZ + "ZonedTimestamp": "io.debezium.time.ZonedTimestamp",
    DBZ + "NanoTimestamp": "io.debezium.time.NanoTimestamp (to the microsecond)",
    "io.debezium.data.Json": "io.debezium.data.Json: JSON text",
}
MAX_PRECISION = 38


def connect_name(s: Any) -> str | None:
    """The ``connect.name`` of a type (a union's non-null member's), None if it has none."""
    if isinstance(s, dict):
        name = s.get("connect.name")
        if isinstance(name, str):
            return name
        return connect_name(s["type"]) if isinstance(s.get("type"), (dict, list)) else None
    if isinstance(s, list):
        named = [n for m in s if (n := connect_name(m))]
        return named[0] if len(named) == 1 else None
    return None


def conversion(s: dict[str, Any]) -> str | None:
    """The conversion a type (a dict with a ``type``) needs after decoding, None if it needs none."""
    t, name = s.get("type"), s.get("connect.name")
    if not isinstance(t, str) or not isinstance(name, str):
        return None
    if t == "record" and s.get("logicalType") is None:
        return CONVERTED.get(("record", name))
    return CONVERTED.get((t, name)) if s.get("logicalType") is None else None


def decode_schema(schema: Any, semantic: bool) -> Any:
    """The schema ``from_avro`` decodes with: ``schema`` (not changed) without defaults, with decimals
    clamped to 38 digits and, when ``semantic``, Connect/Debezium names given their logical types."""
    out = copy.deepcopy(schema)
    _rewrite(out, semantic)
    return out


def _rewrite(s: Any, semantic: bool) -> None:
    if isinstance(s, list):
        for m in s:
            _rewrite(m, semantic)
        return
    if not isinstance(s, dict):
        return
    t = s.get("type")
    if isinstance(t, (dict, list)):
        _rewrite(t, semantic)
        return
    if t == "enum":
        s.pop("default", None)  # a symbol to read unknown writer symbols as: the writer is the reader
    name = s.get("connect.name")
    if semantic and isinstance(name, str) and isinstance(t, str) and "logicalType" not in s:
        if (t, name) in LOGICAL:
            s["logicalType"] = LOGICAL[(t, name)]
        elif t == "bytes" and name == CONNECT + "Decimal":
            given = s.get("connect.parameters")
            params: dict[str, Any] = given if isinstance(given, dict) else {}
            s.update(logicalType="decimal", scale=_int(s.get("scale", params.get("scale", 0))),
                     precision=_int(params.get("connect.decimal.precision", MAX_PRECISION)))
    if s.get("logicalType") == "decimal" and t in ("bytes", "fixed"):
        p = s.get("precision")
        if not isinstance(p, int) or isinstance(p, bool) or p > MAX_PRECISION:
            s["precision"] = MAX_PRECISION
    if t in ("record", "error"):
        fields = s.get("fields")
        if semantic and conversion(s) == "variable_decimal" and isinstance(fields, list):
            for f in fields:
                if isinstance(f, dict) and f.get("name") == "value" and f.get("type") == "bytes":
                    f["type"] = {"type": "bytes", "logicalType": "decimal", "precision": MAX_PRECISION, "scale": 0}
        for f in fields if isinstance(fields, list) else []:
            if isinstance(f, dict):
                f.pop("default", None)
                _rewrite(f.get("type"), semantic)
    elif t == "array":
        _rewrite(s.get("items"), semantic)
    elif t == "map":
        _rewrite(s.get("values"), semantic)


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1  # refused by the decimal check (scale 0 to precision)
