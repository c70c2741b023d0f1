"""CDC: change records → a current-state table, one MERGE per table per micro-batch.

Per batch and table: the change records are unwrapped (plain rows with an operation field, or the
Debezium envelope), bad changes become dead letters (``unknown_operation``, ``missing_key``,
``missing_ordering``), the newest change per key wins (by the ordering field, then Kafka
position), and one ``MERGE`` applies them:

- delete: when the table's row is not newer than the delete;
- insert/update/read: insert when absent, update only when the change is newer than the row.

The row's ordering value is kept in ``_cdc_ordering``, so an old change delivered late or replayed
never overwrites a newer one. Deleted keys keep their ordering in ``<table>_tombstones`` so an old
change arriving after a delete cannot resurrect the row (appended; the newest per key counts).
MERGE runs through Spark's DataFrame ``mergeInto`` (no SQL text) inside Iceberg's
``CommitMetadata.withCommitProperties``, so the commit carries icetide's exactly-once tags
atomically, as appends do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql import Column, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType, TimestampType

from icetide.config.target import CdcSettings
from icetide.ingest import decode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OP = "_cdc_op"
ORDERING = "_cdc_ordering"
RAW = decode.RAW
#: Columns icetide adds to CDC tables (besides the _kafka_ ones).
META_COLUMNS = (ORDERING,)
ERROR_CLASSES = ("unknown_operation", "missing_key", "missing_ordering")
_SRC = "_icetide_src"


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


def _ops(cdc: CdcSettings, op: Column) -> Column:
    return (F.when(op.isin(cdc.delete_values), F.lit("delete"))
            .when(op.isin([*cdc.insert_values, *cdc.update_values, *cdc.read_values]), F.lit("upsert")))


def unwrap(rows: DataFrame, cdc: CdcSettings) -> DataFrame:
    """Keep the original bytes for dead letters; ``value`` becomes the row; add operation and ordering."""
    f = _fields(cdc)
    rows = rows.withColumn("_cdc_env", _envelope(cdc))
    env = F.col("_cdc_env")
    op = _pick(env, f["op"])
    norm = _ops(cdc, op)
    row = F.when(norm == "delete", env["before"]).otherwise(env["after"]) if cdc.format == "debezium" else _text()
    ordering = _pick(env, f["ordering"]).try_cast(ordering_type(cdc))
    return (rows.withColumn(RAW, F.col("value")).withColumn(OP, norm).withColumn(ORDERING, ordering)
            .withColumn("_cdc_op_raw", op)
            .withColumn("value", F.when(F.col("value").isNotNull(), row.cast("binary")))
            .drop("_cdc_env"))


def text_for_inference(cdc: CdcSettings) -> Column:
    """The row JSON of a change (what the table's columns come from)."""
    if cdc.format == "plain":
        return _text()
    env = _envelope(cdc)
    return F.when(_ops(cdc, env["op"]) == "delete", env["before"]).otherwise(env["after"])


def errors(cdc: CdcSettings, parsed_col: str) -> tuple[Column, Column]:
    """(class, message) of changes that cannot be applied; null for good ones."""
    p = F.col(parsed_col)
    missing = [F.when(p[k].isNull(), F.lit(k)) for k in cdc.primary_key]
    where = "the envelope's 'op'" if cdc.format == "debezium" else f"'{cdc.operation_field}'"
    cls = (F.when(F.col(OP).isNull(), F.lit("unknown_operation"))
           .when(F.concat_ws(",", *missing) != "", F.lit("missing_key"))
           .when(F.col(ORDERING).isNull(), F.lit("missing_ordering")))
    known = sorted({*cdc.insert_values, *cdc.update_values, *cdc.delete_values, *cdc.read_values})
    msg = (F.when(F.col(OP).isNull(),
                  F.concat(F.lit(f"operation {where} is "), F.coalesce(F.concat(F.lit("'"), F.substring(
                      F.col("_cdc_op_raw"), 1, 40), F.lit("'")), F.lit("missing")),
                      F.lit(f"; known: {known} (target.cdc.*_values)")))
           .when(F.concat_ws(",", *missing) != "",
                 F.concat(F.lit("primary key column(s) missing or null: "), F.concat_ws(",", *missing)))
           .when(F.col(ORDERING).isNull(),
                 F.lit(f"ordering field '{cdc.ordering}' is missing or not a {cdc.ordering_type} "
                       "(target.cdc.ordering, target.cdc.ordering_type)")))
    return cls, msg


def latest_per_key(changes: DataFrame, cdc: CdcSettings) -> DataFrame:
    """The newest change per key in this batch (ordering, then Kafka position)."""
    w = Window.partitionBy(*[F.col(k) for k in cdc.primary_key]).orderBy(
        F.col(ORDERING).desc(), F.col("_kafka_offset").desc(), F.col("_kafka_partition").desc())
    return changes.withColumn("_rn", F.row_number().over(w)).where(F.col("_rn") == 1).drop("_rn")


#: When the delete a tombstone remembers was produced (its Kafka timestamp): what
#: ``target.cdc.tombstone_horizon`` trims by.
DELETED_AT = "_deleted_at"


def tombstone_schema(table_schema: StructType, cdc: CdcSettings) -> StructType:
    by_name = {f.name: f for f in table_schema.fields}
    return StructType([StructField(k, by_name[k].dataType, True) for k in cdc.primary_key]
                      + [StructField(ORDERING, ordering_type(cdc), True),
                         StructField(DELETED_AT, TimestampType(), True)])


def not_buried(changes: DataFrame, tombstones: DataFrame | None, cdc: CdcSettings) -> DataFrame:
    """Drop changes not newer than a recorded delete of their key (a replayed delete stays)."""
    if tombstones is None:
        return changes
    t = (tombstones.groupBy(*cdc.primary_key).agg(F.max(ORDERING).alias("_tb_ord"))
         .select(*[F.col(k).alias(f"_tb_{k}") for k in cdc.primary_key], "_tb_ord"))
    cond = [changes[k].eqNullSafe(t[f"_tb_{k}"]) for k in cdc.primary_key]
    joined = changes.join(t, on=cond[0] if len(cond) == 1 else _and(cond), how="left")
    keep = (F.col("_tb_ord").isNull() | (F.col(ORDERING) > F.col("_tb_ord"))
            | ((F.col(OP) == "delete") & (F.col(ORDERING) >= F.col("_tb_ord"))))
    return joined.where(keep).drop(*[f"_tb_{k}" for k in cdc.primary_key], "_tb_ord")


def _and(cols: list[Column]) -> Column:
    out = cols[0]
    for c in cols[1:]:
        out = out & c
    return out


def merge(source: DataFrame, table: str, cdc: CdcSettings) -> None:
    """One MERGE of the newest changes into ``table`` (fully qualified)."""
    name = table.split(".")[-1]
    s = source.alias(_SRC)
    on = _and([F.col(f"{_SRC}.{k}") == F.col(f"{name}.{k}") for k in cdc.primary_key])
    newer = F.col(f"{_SRC}.{ORDERING}") > F.col(f"{name}.{ORDERING}")
    not_older = F.col(f"{_SRC}.{ORDERING}") >= F.col(f"{name}.{ORDERING}")
    is_delete = F.col(f"{_SRC}.{OP}") == "delete"
    cols = [c for c in source.columns if c != OP]
    assignments = {c: F.col(f"{_SRC}.{c}") for c in cols}
    (s.mergeInto(table, on)
     .whenMatched(is_delete & not_older).delete()
     .whenMatched(~is_delete & newer).update(assignments)
     .whenNotMatched(~is_delete).insert(assignments)
     .merge())


class _Callable:
    """A Python function as a ``java.util.concurrent.Callable`` (py4j callback)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.fn()
        except BaseException as e:
            self.error = e
            raise

    class Java:
        implements: ClassVar[list[str]] = ["java.util.concurrent.Callable"]


def with_commit_properties(spark: SparkSession, properties: dict[str, str], fn: Callable[[], None]) -> None:
    """Run ``fn`` so that the Iceberg commit it makes carries ``properties`` in its snapshot summary."""
    from pyspark.java_gateway import ensure_callback_server_started

    sc: Any = spark.sparkContext
    ensure_callback_server_started(sc._gateway)
    jvm: Any = spark._jvm
    props = jvm.java.util.HashMap()
    for k, v in properties.items():
        props.put(k, v)
    call = _Callable(fn)
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            props, call, jvm.java.lang.Class.forName("java.lang.RuntimeException"))
    except Exception:
        if call.error is not None:
            raise call.error from None
        raise


MERGE_CONFLICT_RETRIES = 5


def merge_retrying_conflicts(spark: SparkSession, properties: dict[str, str], source: DataFrame, table: str,
                             cdc: CdcSettings, retries: int = MERGE_CONFLICT_RETRIES,
                             backoff_seconds: float = 0.5) -> int:
    """The tagged MERGE; a commit conflict (e.g. a compaction replaced files the MERGE deletes from)
    is retried on fresh metadata, so maintenance never fails a batch. Returns the retries used.

    Safe because a failed MERGE commits nothing and the MERGE is idempotent on its input."""
    from icetide.errors import is_commit_conflict

    for attempt in range(retries + 1):
        try:
            with_commit_properties(spark, properties, lambda: merge(source, table, cdc))
            return attempt
        except Exception as e:
            if attempt == retries or not is_commit_conflict(e):
                raise
            wait = backoff_seconds * 2**attempt
            log.warning("MERGE into %s conflicted with a concurrent commit (%s); retry %d in %.1fs", table,
                        (str(e).strip().splitlines() or [type(e).__name__])[0][:300], attempt + 1, wait)
            time.sleep(wait)
    return retries
