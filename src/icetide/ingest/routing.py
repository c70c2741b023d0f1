"""Routing: which table each record goes to, decided on the JVM, validated twice.

A routing value is data from the outside. It never reaches SQL text or a path: it is checked
per record against a fixed ASCII alphabet *before* any case folding (so look-alikes such as the
Kelvin sign cannot fold into a valid name), rendered into the configured template, and the result
is checked again (name rules, reserved words, allowed namespaces). The driver re-validates every
distinct table name with :func:`icetide.identifiers.validate_table` before it touches a catalog.
Records that fail any check are dead letters (``missing_route``, ``invalid_route``,
``table_limit``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from icetide.config.base import PLACEHOLDER_RE
from icetide.config.target import RouteSettings, TargetTable
from icetide.errors import IdentifierError
from icetide.identifiers import SQL_RESERVED, validate_table
from icetide.ingest.formats.base import verdict_class, verdict_message

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

TABLE = "_icetide_table"
ROUTE_ERROR = "_icetide_route_error"
ROUTE_MESSAGE = "_icetide_route_message"
RAW_ROUTE = "_icetide_route_value"
CHECK = "_icetide_check"

#: Names icetide keeps for its CDC tombstone tables (never a routing destination).
TOMBSTONE_SUFFIX = "_tombstones"
#: A routing value from a field or header, checked before lower-casing.
VALUE_PATTERN = r"^[A-Za-z0-9_]{1,64}\z"  # \z: Java's $ also matches before a final newline
#: One rendered identifier part (mirrors icetide.identifiers.NAME_RE).
PART_PATTERN = r"^[a-z_][a-z0-9_]{0,127}\z"


def _text() -> Column:
    return F.col("value").cast("string")


def raw_value(route: RouteSettings) -> Column:
    """The routing value as the record carries it (null when absent; ``record_name``: only a
    format that names its records has one, :meth:`icetide.ingest.formats.Formats.route_value`)."""
    if route.by == "topic":
        return F.col("_kafka_topic")
    if route.by == "record_name":
        return F.lit(None).cast("string")
    assert route.name is not None
    if route.by == "field":
        # route.name is a validated dot path (config), never record data.
        return F.get_json_object(_text(), "$." + route.name)
    hit = F.filter(F.col("_kafka_headers"), lambda h: h["key"] == F.lit(route.name))
    return F.get(hit, 0)["value"].cast("string")


def _render(route: RouteSettings, value: Column) -> tuple[Column, Column]:
    """(namespace, table) columns from the template; placeholders replaced by ``value``/topic."""
    topic = F.lower(F.regexp_replace(F.col("_kafka_topic"), r"[.\-]", "_"))

    def render(part: str) -> Column:
        pieces: list[Column] = []
        pos = 0
        for m in PLACEHOLDER_RE.finditer(part):
            if m.start() > pos:
                pieces.append(F.lit(part[pos:m.start()]))
            pieces.append(topic if m.group(1) == "topic" else value)
            pos = m.end()
        if pos < len(part):
            pieces.append(F.lit(part[pos:]))
        return F.concat(*pieces)

    ns, table = route.template_parts()
    return render(ns), render(table)


def _table(route: RouteSettings, raw: Column, reserved: set[str]) -> tuple[Column, Column, Column]:
    """(routing value allowed, rendered namespace.table, table allowed) for routing value ``raw``."""
    if route.by == "topic":
        value = F.lower(F.regexp_replace(F.col("_kafka_topic"), r"[.\-]", "_"))
        value_ok = F.lit(True)
    else:
        value = F.lower(raw)
        value_ok = raw.rlike(VALUE_PATTERN)
    ns, name = _render(route, value)
    table = F.concat(ns, F.lit("."), name)
    allowed = sorted(route.namespaces or [])
    name_ok = (
        ns.rlike(PART_PATTERN) & name.rlike(PART_PATTERN)
        & ~name.isin(sorted(SQL_RESERVED)) & ns.isin(allowed) & ~name.endswith(TOMBSTONE_SUFFIX)
        & ~table.isin(sorted(reserved))
    )
    return value_ok, table, name_ok


def table_column(route: RouteSettings, reserved: set[str], max_value_bytes: int) -> Column:
    """Each JSON record's table as :func:`with_route` (without a verdict) gives it, in one
    expression over the Kafka columns (the routing value read wherever it is needed): what the one
    pass evaluates for the records its own reading of the routing field cannot vouch for."""
    raw = raw_value(route)
    value_ok, table, name_ok = _table(route, raw, reserved)
    null_value = F.col("value").isNull() if route.by == "field" else F.lit(False)
    return (F.when(null_value, F.lit(None).cast("string"))
            .when(F.length("value") == 0, F.lit(None).cast("string"))
            .when(F.length("value") > max_value_bytes, F.lit(None).cast("string"))
            .when(raw.isNull(), F.lit(None).cast("string"))
            .when(~value_ok | ~name_ok, F.lit(None).cast("string"))
            .otherwise(table))


def allowed_table(route: RouteSettings, table: str, reserved: set[str]) -> bool:
    """Whether routing may name ``table`` at all (the rules of :func:`with_route`'s ``name_ok``)."""
    ns, _, name = table.partition(".")
    return (re.fullmatch(PART_PATTERN[1:-2], ns) is not None and re.fullmatch(PART_PATTERN[1:-2], name) is not None
            and name not in SQL_RESERVED and ns in (route.namespaces or []) and not name.endswith(TOMBSTONE_SUFFIX)
            and table not in reserved)


def template_pieces(route: RouteSettings) -> tuple[list[str], list[str]]:
    """The namespace and table templates as pieces: a literal, or :data:`VALUE_PIECE` /
    :data:`TOPIC_PIECE` for a placeholder (how the JVM renders a table name, as :func:`_render`)."""
    def pieces(part: str) -> list[str]:
        out: list[str] = []
        pos = 0
        for m in PLACEHOLDER_RE.finditer(part):
            if m.start() > pos:
                out.append(part[pos:m.start()])
            out.append(TOPIC_PIECE if m.group(1) == "topic" else VALUE_PIECE)
            pos = m.end()
        if pos < len(part):
            out.append(part[pos:])
        return out

    ns, table = route.template_parts()
    return pieces(ns), pieces(table)


#: In :func:`template_pieces`: the routing value (lower case) and the topic (``.`` and ``-`` as ``_``, lower case).
VALUE_PIECE, TOPIC_PIECE = "{value}", "{topic}"  # a template has no other braces


def with_route(rows: DataFrame, target: TargetTable, reserved: set[str], max_value_bytes: int,
               verdict: Column | None = None, value: Column | None = None) -> DataFrame:
    """Add the target table per record, or an error class and message (routing, or the record
    a format's ``verdict``, see :mod:`icetide.ingest.formats.base`: such a record has no table).
    ``value``: the routing value as the record format reads it (Avro), instead of :func:`raw_value`."""
    if verdict is not None:
        rows = rows.withColumn(CHECK, verdict)
        failed_class, failed_message = verdict_class(F.col(CHECK)), verdict_message(F.col(CHECK))
    else:
        failed_class = failed_message = F.lit(None).cast("string")
    if target.route is None:
        assert target.table is not None
        return (rows.withColumn(ROUTE_ERROR, failed_class)
                .withColumn(ROUTE_MESSAGE, failed_message)
                .withColumn(TABLE, F.when(F.col(ROUTE_ERROR).isNull(), F.lit(target.table)))
                .drop(CHECK))
    route = target.route
    # Extracted once into a column of its own: the checks below refer to it several times, and an
    # inline get_json_object would be evaluated (a JSON parse) once per reference.
    json_field = route.by == "field" and value is None  # the value read from JSON text here
    rows = rows.withColumn(RAW_ROUTE, raw_value(route) if value is None else value)
    raw = F.col(RAW_ROUTE)
    value_ok, table, name_ok = _table(route, raw, reserved)
    allowed = sorted(route.namespaces or [])
    text = _text()
    where = (f"routing {route.by} {route.name!r}" if route.name
             else "the record name (its writer schema is unknown)" if route.by == "record_name" else "the topic")
    missing = F.lit("missing_route")
    if json_field:  # a field is missing from a record that is not a JSON object at all
        missing = (F.when(F.get_json_object(text, "$").isNull(), F.lit("malformed_json"))
                   .when(~F.ltrim(text).startswith("{"), F.lit("not_a_json_object"))
                   .otherwise(missing))
    # A null value (a Kafka tombstone) routed by topic or header still has a table: a CDC table
    # skips it (Debezium's marker after a delete), any other table dead-letters it.
    null_value = F.col("value").isNull() if route.by == "field" else F.lit(False)
    error = (
        F.when(null_value, F.lit("null_value"))
        .when(F.length("value") == 0, F.lit("empty_value"))
        .when(F.length("value") > max_value_bytes, F.lit("oversized_value"))
        .when(failed_class.isNotNull(), failed_class)
        .when(raw.isNull(), missing)
        .when(~value_ok | ~name_ok, F.lit("invalid_route"))
    )
    shown = F.substring(raw, 1, 100)
    missing_message = F.lit(f"{where} is missing or null (target.route)")
    if json_field:
        missing_message = (F.when(F.get_json_object(text, "$").isNull(), F.lit("value is not valid JSON"))
                           .when(~F.ltrim(text).startswith("{"), F.lit("value is JSON but not an object"))
                           .otherwise(missing_message))
    message = (
        F.when(null_value, F.lit("the record has no value (a tombstone)"))
        .when(F.length("value") == 0, F.lit("the record value is empty"))
        .when(F.length("value") > max_value_bytes,
              F.concat(F.lit("value of "), F.length("value").cast("string"),
                       F.lit(f" bytes exceeds source.max_value_bytes={max_value_bytes}")))
        .when(failed_class.isNotNull(), failed_message)
        .when(raw.isNull(), missing_message)
        .when(~value_ok, F.concat(F.lit("routing value '"), shown,
                                  F.lit("' is not allowed: use 1-64 characters of A-Z a-z 0-9 _")))
        .when(~name_ok, F.concat(F.lit("table '"), F.substring(table, 1, 200),
                                 F.lit(f"' is not allowed: namespace must be one of {allowed}, names a-z 0-9 _ "
                                       "starting with a letter or _, not a reserved word or icetide table")))
    )
    return (rows.withColumn(ROUTE_ERROR, error)
            .withColumn(ROUTE_MESSAGE, F.when(F.col(ROUTE_ERROR).isNotNull(), message))
            .withColumn(TABLE, F.when(F.col(ROUTE_ERROR).isNull(), table)).drop(RAW_ROUTE, CHECK))


@dataclass
class Admission:
    """Routed tables of one batch: accepted, and rejected with a reason."""

    accepted: list[str] = field(default_factory=list)
    rejected: dict[str, tuple[str, str]] = field(default_factory=dict)  # table → (class, message)


def admit(routes: list[str], existing: set[str], target: TargetTable, reserved: set[str]) -> Admission:
    """Re-validate each distinct routed table; new tables only while ``max_tables`` allows."""
    out = Admission()
    route = target.route
    valid: list[str] = []
    for t in sorted(routes):
        try:
            ns, _ = validate_table(t, "routed table")
            if route is not None and ns not in (route.namespaces or []):
                raise IdentifierError(f"routed table {t!r} is outside target.route.namespaces")
            if t in reserved or t.endswith(TOMBSTONE_SUFFIX):
                raise IdentifierError(f"routed table {t!r} is one of icetide's own tables")
        except IdentifierError as e:  # the JVM check should have caught it; never trust one layer
            out.rejected[t] = ("invalid_route", str(e))
            continue
        valid.append(t)
    if route is None:
        out.accepted = valid
        return out
    room = route.max_tables - len(existing)
    for t in valid:
        if t in existing:
            out.accepted.append(t)
        elif room > 0:
            out.accepted.append(t)
            room -= 1
        else:
            out.rejected[t] = ("table_limit", f"target.route.max_tables={route.max_tables} reached: table {t} "
                               "was not created; raise the limit and replay the dead letters")
    return out


def flags(route: RouteSettings | None, admitted: list[str], rejected: dict[str, tuple[str, str]]
          ) -> tuple[Column, Column]:
    """Dead-letter class and message of records whose table was not admitted or could not be made
    (``rejected``: table → (class, message)), else the route's own error."""
    table_col = F.col(TABLE)
    route_error, route_message = F.col(ROUTE_ERROR), F.col(ROUTE_MESSAGE)
    for t, (cls, msg) in sorted(rejected.items()):
        route_error = F.when(table_col == F.lit(t), F.lit(cls)).otherwise(route_error)
        route_message = F.when(table_col == F.lit(t), F.lit(msg)).otherwise(route_message)
    if route is not None:
        unlisted = table_col.isNotNull() & ~table_col.isin(admitted) & ~table_col.isin(sorted(rejected))
        limit_msg = (f"target.route.max_tables={route.max_tables} reached: the table was not "
                     "created; raise the limit and replay the dead letters")
        route_error = F.when(unlisted, F.lit("table_limit")).otherwise(route_error)
        route_message = F.when(unlisted, F.lit(limit_msg)).otherwise(route_message)
    return route_error, route_message
