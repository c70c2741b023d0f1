"""CDC: change records → a current-state table, one MERGE per table per micro-batch.

Per batch and table: the change records are unwrapped (plain rows with an operation field, or the
Debezium envelope), bad changes become dead letters (``unknown_operation``, ``missing_key``,
``missing_ordering``), and one ``MERGE`` applies the newest change per key.

One rule everywhere (within a batch, against the table, against the tombstones): the newest change
is the one with the greatest (ordering, Kafka position), position = (offset, partition). So a tie
on the ordering value (``ts_ms`` repeated within a millisecond) goes to the later record whether or
not a batch boundary falls between the two, and a replay of the same change is a no-op.

- delete: when the delete is newer than the table's row;
- insert/update/read: insert when absent, update only when the change is newer than the row.

The row's ordering and position are kept in ``_cdc_ordering`` and ``_cdc_position``, so an old
change delivered late or replayed never overwrites a newer one. Deleted keys keep theirs in
``<table>_tombstones`` so an old change arriving after a delete cannot resurrect the row (appended;
the newest per key counts). Rows and tombstones written before ``_cdc_position`` existed (null
position) keep the earlier rule: a tie on the ordering does not update, and deletes.

MERGE runs through Spark's DataFrame ``mergeInto`` (no SQL text; every name quoted, the source
under a unique alias) inside Iceberg's ``CommitMetadata.withCommitProperties``, so the commit
carries icetide's exactly-once tags atomically, as appends do. It is fenced like an append: it
writes to a branch made at main's head once icetide's ``LedgerFence`` validated that head, then
lands on main fenced again (:mod:`icetide.lake.fence`): a compaction of other files meanwhile
costs nothing, one of the files the MERGE touched makes it run again on the new head.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from icetide.config.target import CdcSettings
from icetide.ingest import decode, names
from icetide.lake.fence import Fence, fenced_write, with_commit_properties

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OP = "_cdc_op"
ORDERING = "_cdc_ordering"
#: The change's Kafka position, (offset, partition): the tie-break after the ordering value.
POSITION = "_cdc_position"
POSITION_TYPE = StructType([StructField("offset", LongType(), True), StructField("partition", IntegerType(), True)])
RAW = decode.RAW
#: Columns icetide adds to CDC tables (besides the _kafka_ ones).
META_COLUMNS = (ORDERING, POSITION)
ERROR_CLASSES = ("unknown_operation", "missing_key", "missing_ordering")


log = logging.getLogger(__name__)

def ordering_type(cdc: CdcSettings) -> DataType:
    return {"long": LongType(), "timestamp": TimestampType(), "string": StringType()}[cdc.ordering_type]


def _text() -> Column:
    return F.col("value").cast("string")


def _nested(paths: dict[str, str]) -> StructType:
    """A struct of strings with one leaf per dot path (nested objects as raw JSON text)."""
    tree: dict[str, Any] = {}
    for path in paths.values():
        node = tree
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"field path {path!r} conflicts with another")
        node.setdefault(parts[-1], None)

    def build(node: dict[str, Any]) -> StructType:
        return StructType([StructField(k, build(v) if isinstance(v, dict) else StringType(), True)
                           for k, v in node.items()])

    return build(tree)


def _pick(struct: Column, path: str) -> Column:
    out = struct
    for part in path.split("."):
        out = out[part]
    return out


def _fields(cdc: CdcSettings) -> dict[str, str]:
    if cdc.format == "debezium":
        return {"op": "op", "ordering": cdc.ordering, "before": "before", "after": "after"}
    return {"op": cdc.operation_field, "ordering": cdc.ordering}


def _envelope(cdc: CdcSettings) -> Column:
    """The change's envelope fields, parsed once (twice for Debezium's ``payload`` wrapping)."""
    schema = _nested(_fields(cdc))
    if cdc.format == "plain":
        return F.from_json(_text(), schema)
    outer = F.from_json(_text(), StructType([*schema.fields, StructField("payload", StringType(), True)]))
    inner = F.from_json(outer["payload"], schema)
    return F.when(F.ltrim(outer["payload"]).startswith("{"), inner).otherwise(outer.dropFields("payload"))


def operations(cdc: CdcSettings, op: Column) -> Column:
    """``delete`` or ``upsert`` from a change's operation value (null: unknown)."""
    return (F.when(op.isin(cdc.delete_values), F.lit("delete"))
            .when(op.isin([*cdc.insert_values, *cdc.update_values, *cdc.read_values]), F.lit("upsert")))


def key_row() -> Column:
    """A Debezium change's Kafka key as row JSON: the key's object (Debezium's JSON converter writes
    the key columns as one), or its ``payload`` object (``schemas.enable=true``: the key is exactly
    ``{"schema", "payload"}``); null when the key is missing or not a JSON object."""
    key = F.ltrim(F.col("_kafka_key").cast("string"))
    # the converter's envelope has exactly these two fields; a key column may be named `schema`
    envelope = F.array_sort(F.json_object_keys(key)) == F.array(F.lit("payload"), F.lit("schema"))
    payload = F.get_json_object(key, "$.payload")
    return (F.when(envelope, F.when(F.ltrim(payload).startswith("{"), payload))
            .when(key.startswith("{"), key))


def unwrap(rows: DataFrame, cdc: CdcSettings) -> DataFrame:
    """Keep the original bytes for dead letters; ``value`` becomes the row; add operation and ordering."""
    f = _fields(cdc)
    rows = rows.withColumn("_cdc_env", _envelope(cdc))
    env = F.col("_cdc_env")
    op = _pick(env, f["op"])
    norm = operations(cdc, op)
    if cdc.format == "debezium":
        # A delete's row is its `before`; PostgreSQL's REPLICA IDENTITY NOTHING (or DEFAULT without the
        # key in `before`) leaves it null, and then the key comes from the Kafka key, where Debezium
        # puts the key columns. Never a null value: that would count as a Kafka tombstone, and the row
        # would stay. No key there either: an empty row, a `missing_key` dead letter.
        before = F.coalesce(env["before"], key_row(), F.lit("{}")) if "_kafka_key" in rows.columns \
            else F.coalesce(env["before"], F.lit("{}"))
        # Nor for any other change: a change with no readable `after` (an operation icetide does not
        # apply, such as `t` or `m`; a malformed or non-object value) is parsed as it came, and so
        # becomes a dead letter of its class, never a skipped tombstone.
        # (A JSON object without `after` becomes `{}`, never the envelope itself: a key named like an
        # envelope field would otherwise read the envelope's value.)
        not_object = F.get_json_object(_text(), "$").isNull() | ~F.ltrim(_text()).startswith("{")
        row = F.when(norm == "delete", before).otherwise(
            F.coalesce(env["after"], F.when(not_object, _text()), F.lit("{}")))
    else:
        row = _text()
    ordering = _pick(env, f["ordering"]).try_cast(ordering_type(cdc))
    return (rows.withColumn(RAW, F.col("value")).withColumn(OP, norm).withColumn(ORDERING, ordering)
            .withColumn("_cdc_op_raw", op)
            .withColumn("value", F.when(F.col("value").isNotNull(), row.cast("binary")))
            .drop("_cdc_env"))


def reads_row(cdc: CdcSettings, schema: StructType) -> bool:
    """Whether a plain change's operation and ordering can be read from its row's parse against
    ``schema`` rather than from an envelope parse of its own (:func:`unwrap`): both are top-level
    fields of the row, the operation a string column and the ordering a column of exactly
    ``target.cdc.ordering_type`` (long or string), each read from the record's field of that very
    name (not a sanitized column, ``target.field_names``). Then every change gets the same verdict
    (dead-letter class and message) and row either way, and a good change the same operation and
    ordering: a row that parses has the very values the envelope would give (the same ``from_json``
    conversion of the same tokens); a change whose row does not parse is a dead letter of the
    parse's class on both paths (the parse's class comes first, :func:`icetide.ingest.decode.parse`),
    whatever operation and ordering each path read."""
    if cdc.format != "plain" or "." in cdc.operation_field or "." in cdc.ordering:
        return False
    by_name = {f.name: f for f in schema.fields}
    op, ordering, wanted = by_name.get(cdc.operation_field), by_name.get(cdc.ordering), ordering_type(cdc)
    return (op is not None and ordering is not None and op.dataType == StringType() and ordering.dataType == wanted
            and not isinstance(wanted, TimestampType)  # from_json's timestamps are not try_cast's
            and names.original(op) == op.name and names.original(ordering) == ordering.name)


def row_fields(cdc: CdcSettings, parsed_col: str) -> tuple[Column, Column, Column]:
    """(raw operation, operation, ordering) of a plain change read from its parsed row
    (:func:`reads_row`)."""
    p = F.col(parsed_col)
    raw = p[cdc.operation_field]
    return raw, operations(cdc, raw), p[cdc.ordering]


def text_for_inference(cdc: CdcSettings) -> Column:
    """The row JSON of a change (what the table's columns come from)."""
    if cdc.format == "plain":
        return _text()
    env = _envelope(cdc)
    return F.when(operations(cdc, env["op"]) == "delete", env["before"]).otherwise(env["after"])


def errors(cdc: CdcSettings, parsed_col: str, fields: tuple[Column, Column, Column] | None = None
           ) -> tuple[Column, Column]:
    """(class, message) of changes that cannot be applied; null for good ones. ``fields``: (raw
    operation, operation, ordering), by default the columns :func:`unwrap` adds."""
    p = F.col(parsed_col)
    op_raw, op, ordering = fields or (F.col("_cdc_op_raw"), F.col(OP), F.col(ORDERING))
    missing = [F.when(p[k].isNull(), F.lit(k)) for k in cdc.primary_key]
    where = "the envelope's 'op'" if cdc.format == "debezium" else f"'{cdc.operation_field}'"
    cls = (F.when(op.isNull(), F.lit("unknown_operation"))
           .when(F.concat_ws(",", *missing) != "", F.lit("missing_key"))
           .when(ordering.isNull(), F.lit("missing_ordering")))
    known = sorted({*cdc.insert_values, *cdc.update_values, *cdc.delete_values, *cdc.read_values})
    msg = (F.when(op.isNull(),
                  F.concat(F.lit(f"operation {where} is "), F.coalesce(F.concat(F.lit("'"), F.substring(
                      op_raw, 1, 40), F.lit("'")), F.lit("missing")),
                      F.lit(f"; known: {known} (target.cdc.*_values)")))
           .when(F.concat_ws(",", *missing) != "",
                 F.concat(F.lit("primary key column(s) missing or null: "), F.concat_ws(",", *missing)))
           .when(ordering.isNull(),
                 F.lit(f"ordering field '{cdc.ordering}' is missing or not a {cdc.ordering_type} "
                       "(target.cdc.ordering, target.cdc.ordering_type)")))
    return cls, msg


def position() -> Column:
    """A change's Kafka position (needs ``_kafka_offset`` and ``_kafka_partition``)."""
    return F.struct(F.col("_kafka_offset").cast("long").alias("offset"),
                    F.col("_kafka_partition").cast("int").alias("partition"))


def latest_per_key(changes: DataFrame, cdc: CdcSettings) -> DataFrame:
    """The newest change per key in this batch, by (ordering, position); adds ``_cdc_position``."""
    w = Window.partitionBy(*[F.col(quote(k)) for k in cdc.primary_key]).orderBy(
        F.col(ORDERING).desc(), F.col("_kafka_offset").desc(), F.col("_kafka_partition").desc())
    # helper names under the reserved _cdc_ prefix: no record field can have them (reserved_field)
    return (changes.withColumn("_cdc_rn", F.row_number().over(w)).where(F.col("_cdc_rn") == 1).drop("_cdc_rn")
            .withColumn(POSITION, position()))


def newer(ordering: Column, pos: Column, than_ordering: Column, than_pos: Column) -> Column:
    """(ordering, pos) > (than_ordering, than_pos); a null ``than_pos`` (written before positions
    were kept) is never beaten on a tie."""
    return (ordering > than_ordering) | ((ordering == than_ordering) & than_pos.isNotNull() & (pos > than_pos))


def deletes_over(ordering: Column, pos: Column, than_ordering: Column, than_pos: Column) -> Column:
    """Whether a delete at (ordering, pos) removes a row at (than_*): newer, or (rows written before
    positions were kept) an equal ordering."""
    return newer(ordering, pos, than_ordering, than_pos) | ((ordering == than_ordering) & than_pos.isNull())


def quote(name: str) -> str:
    """A column or alias name as a quoted identifier part (any name a record can bring)."""
    return "`" + name.replace("`", "``") + "`"


def _col(qualifier: str, name: str) -> Column:
    return F.col(f"{quote(qualifier)}.{quote(name)}")


#: When the delete a tombstone remembers was produced (its Kafka timestamp): what
#: ``target.cdc.tombstone_horizon`` trims by.
DELETED_AT = "_deleted_at"


def tombstone_schema(table_schema: StructType, cdc: CdcSettings) -> StructType:
    by_name = {f.name: f for f in table_schema.fields}
    return StructType([StructField(k, by_name[k].dataType, True) for k in cdc.primary_key]
                      + [StructField(ORDERING, ordering_type(cdc), True),
                         StructField(DELETED_AT, TimestampType(), True),
                         StructField(POSITION, POSITION_TYPE, True)])


def not_buried(changes: DataFrame, tombstones: DataFrame | None, cdc: CdcSettings) -> DataFrame:
    """Drop changes not newer than a recorded delete of their key (a replayed delete stays)."""
    if tombstones is None:
        return changes
    pos = F.col(POSITION) if POSITION in tombstones.columns else F.lit(None).cast(POSITION_TYPE)
    keys = {k: f"_cdc_tb_{i}" for i, k in enumerate(cdc.primary_key)}  # reserved: no record field's name
    t = (tombstones.groupBy(*[F.col(quote(k)).alias(a) for k, a in keys.items()])
         .agg(F.max(F.struct(F.col(ORDERING).alias("o"), pos.alias("p"))).alias("_cdc_tb")))
    cond = [changes[quote(k)].eqNullSafe(t[a]) for k, a in keys.items()]
    joined = changes.join(t, on=cond[0] if len(cond) == 1 else _and(cond), how="left")
    o, p = F.col(ORDERING), F.col(POSITION)
    tb_o, tb_p = F.col("_cdc_tb.o"), F.col("_cdc_tb.p")
    keep = (F.col("_cdc_tb").isNull() | newer(o, p, tb_o, tb_p)
            | ((F.col(OP) == "delete") & (deletes_over(o, p, tb_o, tb_p) | ((o == tb_o) & (p == tb_p)))))
    return joined.where(keep).drop(*keys.values(), "_cdc_tb")


def _and(cols: list[Column]) -> Column:
    out = cols[0]
    for c in cols[1:]:
        out = out & c
    return out


def merge(source: DataFrame, target: str, qualifier: str, cdc: CdcSettings) -> None:
    """One MERGE of the newest changes into ``target`` (fully qualified, possibly a branch:
    ``cat.ns.table.branch_x``), whose columns Spark qualifies with ``qualifier`` (its last part)."""
    src = f"__icetide_src_{uuid.uuid4().hex[:8]}"  # never a table's name: no alias collision
    s = source.alias(src)
    on = _and([_col(src, k) == _col(qualifier, k) for k in cdc.primary_key])
    args = (_col(src, ORDERING), _col(src, POSITION), _col(qualifier, ORDERING), _col(qualifier, POSITION))
    is_delete = _col(src, OP) == "delete"
    assignments = {quote(c): _col(src, c) for c in source.columns if c != OP}
    (s.mergeInto(target, on)
     .whenMatched(is_delete & deletes_over(*args)).delete()
     .whenMatched(~is_delete & newer(*args)).update(assignments)
     .whenNotMatched(~is_delete).insert(assignments)
     .merge())


MERGE_CONFLICT_RETRIES = 5


def fenced_merge(spark: SparkSession, properties: dict[str, str], source: DataFrame, table: str,
                 cdc: CdcSettings, fence: Fence | None) -> None:
    """The tagged MERGE into ``table``; with ``fence``, landed only where the fence approves
    (:func:`~icetide.lake.fence.fenced_write`; else :class:`~icetide.errors.FencedError`)."""

    def write(target: str) -> None:
        with_commit_properties(spark, properties, lambda: merge(source, target, target.split(".")[-1], cdc))

    if fence is None:
        write(table)
    else:
        fenced_write(spark, table, fence, write, merge=True)


def merge_retrying_conflicts(spark: SparkSession, properties: dict[str, str], source: DataFrame, table: str,
                             cdc: CdcSettings, retries: int = MERGE_CONFLICT_RETRIES,
                             backoff_seconds: float = 0.5, fence: Fence | None = None) -> int:
    """The tagged (and with ``fence``, fenced) MERGE; a commit conflict (a compaction replaced files
    the MERGE deletes from, or committed while the MERGE was staged) is retried on fresh metadata,
    so maintenance never fails a batch. A fenced refusal is not retried. Returns the retries used.

    Safe because a failed MERGE commits nothing and the MERGE is idempotent on its input."""
    from icetide.errors import is_commit_conflict, is_fenced

    for attempt in range(retries + 1):
        try:
            fenced_merge(spark, properties, source, table, cdc, fence)
            return attempt
        except Exception as e:
            if attempt == retries or is_fenced(e) or not is_commit_conflict(e):
                raise
            wait = backoff_seconds * 2**attempt
            log.warning("MERGE into %s conflicted with a concurrent commit (%s); retry %d in %.1fs", table,
                        (str(e).strip().splitlines() or [type(e).__name__])[0][:300], attempt + 1, wait)
            time.sleep(wait)
    return retries
