"""The appends of many tables in one Spark job (icetide's JVM class ``io.icetide.spark.MultiTableWrite``).

Spark writes one table per job. A micro-batch routed to 20 tables would pay a job's fixed cost
(scheduling, planning, a scan of the cached batch) 20 times, and on a small cluster those jobs
leave the executors idle most of the time. Here every table keeps its own Iceberg write (the
table's writer, file size, format and snapshot properties), but the tasks of all tables run as one
job; each table is then committed on its own, so a crash between two commits is recovered per
table exactly as before.

A table whose write needs a sort (``write.distribution-mode=range``, a sort order, the fan-out
writer off), a required column, or rows that do not match it as they are, is refused and written by
its own Spark job; so is one that needs a shuffle (``write.distribution-mode=hash``), except in
routed mode, whose caller shuffles the frame by the table's partition (:func:`clustered_frame`).

Routed mode (:meth:`MultiTableWrite.add_target`, :meth:`MultiTableWrite.run_routed`) takes one
frame holding every table's rows; see :mod:`icetide.ingest.one_pass`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from icetide.spark.session import has_class

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

JVM_CLASS = "io.icetide.spark.MultiTableWrite"


def available(spark: SparkSession) -> bool:
    """Whether icetide's JVM classes are on the session's classpath (see :func:`icetide.jvm.build`)."""
    return has_class(spark, JVM_CLASS)


def frame(rows: DataFrame, good: Column, ts: Column, columns: dict[str, Column], table_schema: StructType
          ) -> DataFrame:
    """The frame :meth:`MultiTableWrite.add` takes: (good, ts, then the table's columns, in its
    order; a table column the records do not give is null). No struct per row: the writer is handed
    a view of the frame's row."""
    row = [(columns[f.name] if f.name in columns else F.lit(None).cast(f.dataType)).alias(f.name)
           for f in table_schema.fields]
    return rows.select(good.alias("good"), ts.cast("long").alias("ts"), *row)


@dataclass(frozen=True)
class Clustering:
    """One key of a table's hash distribution: Iceberg's partition transform ``transform`` (with its
    integer ``args``, e.g. a bucket count) of the row's column at index ``column``."""

    transform: str
    args: tuple[int, ...]
    column: int


def clustered_frame(frame: DataFrame, catalog: str, starts: list[int], keys: list[list[Clustering]]) -> DataFrame:
    """``frame`` (``run_routed``'s: idx first, table ``i``'s row from column ``starts[i]``) shuffled so
    that the rows of one partition of a table meet in one task, as Spark's own write of a table with
    ``write.distribution-mode=hash`` shuffles them: each task then writes a partition's rows into one
    file, not one file per task. The key is table ``i``'s transforms, computed by the catalog's own
    functions (Iceberg's ``system.days`` ...); every table has keys. Every key is deterministic, so a
    retried task sends each row where it sent it before; a row of no table (null ``idx``) has a null key."""
    names = frame.columns
    quoted = ".".join(f"`{p.replace('`', '``')}`" for p in (catalog, "system"))
    idx = F.col(names[0])
    key: Column | None = None
    for i, (start, mine) in enumerate(zip(starts, keys, strict=True)):
        assert mine, f"table {i} of the frame asks for no clustering"
        parts = [F.lit(i)]
        for k in mine:
            col = F.col(f"`{names[start + k.column]}`")
            parts.append(col if k.transform == "identity" else
                         F.call_function(f"{quoted}.{k.transform}", *[F.lit(a) for a in k.args], col))
        value = F.hash(*parts)
        key = F.when(idx == i, value) if key is None else key.when(idx == i, value)
    assert key is not None, "a frame of no tables"
    return frame.repartition(key)


@dataclass
class Written:
    good: int
    bad: int
    ts_max: int | None


@dataclass(frozen=True)
class Decoding:
    """How :meth:`MultiTableWrite.run_decoded` decodes and lays out rows (see ``MultiTableWrite.runDecoded``)."""

    group_of: list[int]  # per table of the order: its record type in ``types``
    types: list[str]  # record types (JSON), what from_json would be given
    layout: list[int]  # per table and column: record field (>= 0), frame column k (-1 - k), or NULL
    time_zone: str
    max_depth: int
    max_fields: int
    reserved: tuple[str, ...]
    max_value_bytes: int
    max_shapes: int
    sample: bool
    # routing by a JSON field, read by the decoder (see MultiTableWrite.runDecoded); None: by the frame's idx
    route_path: list[str] | None = None
    namespace_pieces: list[str] | None = None
    table_pieces: list[str] | None = None
    route_tables: list[str | None] | None = None
    fallback: Column | None = None


#: In a :class:`Decoding` layout: the column is null.
NULL = -(2**31)


class MultiTableWrite:
    """Python handle on one job: :meth:`add` tables (from any thread), :meth:`run` once, then
    :meth:`commit` each (from any thread). Tables are named ``namespace.table``."""

    def __init__(self, spark: SparkSession) -> None:
        jvm = spark._jvm
        assert jvm is not None
        self._jvm: Any = jvm
        self._gateway: Any = spark.sparkContext._gateway
        self._j: Any = jvm.io.icetide.spark.MultiTableWrite(spark._jsparkSession)

    def add(self, catalog: str, table: str, frame: DataFrame, properties: dict[str, str]) -> str | None:
        """Add ``table`` with its snapshot properties; the reason if it must be written on its own."""
        namespace, name = table.split(".", 1)
        options = {f"snapshot-property.{k}": v for k, v in properties.items()}
        reason = self._j.add(catalog, namespace, name, frame._jdf, options)
        return None if reason is None else str(reason)

    def add_target(self, catalog: str, table: str, row_schema: StructType, properties: dict[str, str],
                   clustered: bool = False) -> str | None:
        """Add ``table`` to a routed job, its rows being ``row_schema``; the reason if it cannot be.
        ``clustered``: a table whose write asks for a hash distribution is added too, and the frame
        given to :meth:`run_routed` is then clustered by :meth:`clustering` (:func:`clustered_frame`)."""
        namespace, name = table.split(".", 1)
        options = {f"snapshot-property.{k}": v for k, v in properties.items()}
        reason = self._j.addTarget(catalog, namespace, name, self._struct(row_schema), options, clustered)
        return None if reason is None else str(reason)

    def clustering(self, table: str) -> list[Clustering]:
        """How ``table``'s rows must be clustered before its writer sees them (empty: no ask)."""
        text = self._j.clustering(table)
        return [] if text is None else [Clustering(x["transform"], tuple(x["args"]), x["column"])
                                        for x in json.loads(str(text))]

    def _struct(self, schema: StructType) -> Any:
        return self._jvm.org.apache.spark.sql.types.DataType.fromJson(schema.json())

    def run_routed(self, frame: DataFrame, order: list[str], starts: list[int], max_shapes: int,
                   sample_column: int = -1) -> None:
        """Write the tables of ``order`` from one frame (idx, good, ts, shape, then the tables'
        columns side by side) in one job; table ``order[i]``'s row is the frame's columns from
        ``starts[i]``, as many as it has. Nothing is committed.
        ``sample_column``: the frame's column of record values to keep one of per shape (:meth:`samples`)."""
        names = self._gateway.new_array(self._jvm.java.lang.String, len(order))
        columns = self._gateway.new_array(self._jvm.int, len(order))
        for i, (t, c) in enumerate(zip(order, starts, strict=True)):
            names[i] = t
            columns[i] = c
        self._j.runRouted(frame._jdf, names, columns, max_shapes, sample_column)

    def run_decoded(self, frame: DataFrame, order: list[str], decoding: Decoding) -> None:
        """Write the tables of ``order`` from one frame (idx, ts, value, Kafka columns) in one job, each
        JSON value decoded in the write task, once, for its checks, shape and row. Nothing is committed."""
        g, jvm = self._gateway, self._jvm

        def ints(xs: list[int]) -> Any:
            out = g.new_array(jvm.int, len(xs))
            for i, x in enumerate(xs):
                out[i] = x
            return out

        def strings(xs: list[str] | tuple[str, ...]) -> Any:
            out = g.new_array(jvm.java.lang.String, len(xs))
            for i, x in enumerate(xs):
                out[i] = x
            return out

        d = decoding
        route: list[Any] = [None] * 5
        if d.route_path is not None:
            assert d.namespace_pieces is not None and d.table_pieces is not None
            assert d.route_tables is not None and d.fallback is not None
            tables = g.new_array(jvm.java.lang.String, len(d.route_tables))
            for i, x in enumerate(d.route_tables):
                tables[i] = x
            route = [strings(d.route_path), strings(d.namespace_pieces), strings(d.table_pieces), tables,
                     d.fallback._jc]  # type: ignore[attr-defined]
        self._j.runDecoded(frame._jdf, strings(order), ints(d.group_of), strings(d.types), ints(d.layout),
                           d.time_zone, d.max_depth, d.max_fields, strings(d.reserved), d.max_value_bytes,
                           d.max_shapes, d.sample, *route)

    def samples(self, table: str, shapes: list[int]) -> list[str] | None:
        """A record value (text) of each of ``shapes`` of ``table`` in the routed job; None if one has none."""
        wanted = self._gateway.new_array(self._jvm.long, len(shapes))
        for i, x in enumerate(shapes):
            wanted[i] = x
        got = self._j.samples(table, wanted)
        return None if got is None else [str(v) for v in got]

    def unrouted(self) -> int:
        """Rows of the routed job that named none of its tables."""
        return int(self._j.unrouted())

    def shapes(self, table: str) -> frozenset[int] | None:
        """The record shapes of ``table``'s rows in the routed job; None when there were too many."""
        s = self._j.shapes(table)
        return None if s is None else frozenset(int(x) for x in s)

    def run(self) -> None:
        """Write every added table's files in one job (nothing is committed)."""
        self._j.run()

    def written(self, table: str) -> Written:
        ts = self._j.tsMax(table)
        return Written(int(self._j.good(table)), int(self._j.bad(table)), int(ts) if ts is not None else None)

    def commit(self, table: str) -> None:
        """Commit ``table``'s files through Spark's Iceberg write (not fenced)."""
        self._j.commit(table)

    def take_files(self, table: str) -> Any:
        """``table``'s written Iceberg data files (a JVM array) for a commit made by the caller."""
        return self._j.takeFiles(table)

    def discard(self, table: str) -> None:
        """Delete the files :meth:`take_files` returned (their commit was refused)."""
        self._j.discard(table)

    def abort(self, table: str) -> None:
        self._j.abort(table)
