""":class:`~icetide.lake.meta.MetaReader` on Spark: Iceberg's metadata tables through SQL.

Used where a SparkSession is running anyway (the pipeline's in-run maintenance, ``icetide maintain``).
Only validated identifiers reach SQL text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from icetide.config.base import COLUMN_RE
from icetide.identifiers import validate_name
from icetide.lake.meta import FileBounds, Manifests, Snapshot, SpecField, short, spec_field, utc
from icetide.lake.table_io import TableIO

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

class SparkMeta:
    def __init__(self, spark: SparkSession, catalog: str) -> None:
        self.spark = spark
        self.catalog = validate_name(catalog)
        self._partitioned: dict[str, bool] = {}

    def q(self, table: str) -> str:
        return f"{self.catalog}.{short(table)}"

    def fresh(self) -> SparkMeta:
        return self  # every query reads current metadata (the catalog cache is off)

    def namespaces(self) -> list[str]:
        from icetide.identifiers import validate_name

        return sorted(r[0] for r in self.spark.sql(f"SHOW NAMESPACES IN {validate_name(self.catalog)}").collect())

    def list_tables(self, namespace: str) -> list[str]:
        from icetide.lake.tables import list_tables

        return list_tables(self.spark, self.catalog, namespace)

    def exists(self, table: str) -> bool:
        return bool(self.spark.catalog.tableExists(self.q(table)))

    def columns(self, table: str) -> list[str]:
        return list(self.spark.table(self.q(table)).columns)

    def properties(self, table: str) -> dict[str, str]:
        return {r["key"]: r["value"] for r in self.spark.sql(f"SHOW TBLPROPERTIES {self.q(table)}").collect()}

    def partitioned(self, table: str) -> bool:
        """Whether any spec of the table has a field (asked once per table and reader)."""
        t = short(table)
        if t not in self._partitioned:
            self._partitioned[t] = "partition" in self.spark.table(f"{self.q(t)}.files").columns
        return self._partitioned[t]

    def spec(self, table: str) -> list[SpecField]:
        """The current partition spec, from Iceberg's table API (the same answer PyIceberg gives)."""
        jvm: Any = self.spark._jvm
        tb = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(self.spark._jsparkSession, self.q(table))
        schema = tb.schema()
        out = []
        for f in tb.spec().fields():
            source = str(schema.findColumnName(f.sourceId()) or "")
            if COLUMN_RE.fullmatch(source):
                out.append(spec_field(str(f.name()), str(f.transform().toString()), source))
        return out

    def _part(self, table: str) -> str:
        return "to_json(partition)" if self.partitioned(table) else "''"

    def files(self, table: str) -> pa.Table:
        t = self.q(table)
        return self.spark.sql(f"SELECT {self._part(table)} AS partition, CAST(content AS INT) AS content, "
                              f"file_size_in_bytes, record_count FROM {t}.files").toArrow()

    def partition_writes(self, table: str) -> dict[str, int]:
        if not self.partitioned(table):
            return {}
        rows = self.spark.sql(f"SELECT to_json(partition) AS p, CAST(unix_millis(last_updated_at) AS BIGINT) AS ts "
                              f"FROM {self.q(table)}.partitions").collect()
        return {r["p"]: int(r["ts"]) for r in rows if r["ts"] is not None}

    def snapshots(self, table: str) -> list[Snapshot]:
        rows = self.spark.sql(
            f"SELECT s.snapshot_id, CAST(unix_millis(s.committed_at) AS BIGINT) AS ts, s.summary, s.operation, "
            f"h.is_current_ancestor AS anc, h.made_current_at AS made FROM {self.q(table)}.snapshots s "
            f"LEFT JOIN {self.q(table)}.history h ON s.snapshot_id = h.snapshot_id").collect()
        made: dict[int, Any] = {}  # a snapshot made current twice (a rollback to it) has two history rows
        for r in rows:
            if r["anc"] and (r["snapshot_id"] not in made or r["made"] > made[r["snapshot_id"]]):
                made[r["snapshot_id"]] = r["made"]
        rank = {sid: i for i, sid in enumerate(sorted(made, key=lambda sid: made[sid], reverse=True))}
        once = {r["snapshot_id"]: r for r in rows}
        return [Snapshot(int(sid), int(r["ts"]), {"operation": r["operation"], **(r["summary"] or {})}, rank.get(sid))
                for sid, r in once.items()]

    def manifests(self, table: str) -> Manifests:
        m = self.spark.sql(f"""
            SELECT count(*) AS n, coalesce(sum(length), 0) AS bytes,
                   coalesce(sum(CASE WHEN content = 1 THEN 1 ELSE 0 END), 0) AS dm
            FROM {self.q(table)}.manifests
        """).first()
        return Manifests(int(m["n"]), int(m["bytes"]), int(m["dm"])) if m else Manifests(0, 0, 0)

    def metadata_file_bytes(self, table: str) -> int | None:
        row = self.spark.sql(f"SELECT file FROM {self.q(table)}.metadata_log_entries "
                             "ORDER BY timestamp DESC LIMIT 1").first()
        if row is None:
            return None
        return TableIO.of(self.spark, self.q(table)).size(row["file"])

    def file_bounds(self, table: str, column: str) -> list[FileBounds]:
        t = self.q(table)
        if not COLUMN_RE.fullmatch(column) or column not in self.columns(table):
            return []
        rows = self.spark.sql(f"SELECT {self._part(table)} AS p, file_size_in_bytes AS b, "
                              f"readable_metrics.{column}.lower_bound AS lo, "
                              f"readable_metrics.{column}.upper_bound AS hi FROM {t}.files WHERE content = 0").collect()
        return [FileBounds(r["p"], int(r["b"]), utc(r["lo"]), utc(r["hi"])) for r in rows]

    def rows(self, table: str, columns: list[str], since: tuple[str, int] | None = None) -> list[dict[str, Any]]:
        df = self.spark.table(self.q(table)).select(*[validate_name(c, "column") for c in columns])
        if since is not None:
            df = df.where(F.unix_millis(F.col(validate_name(since[0], "column"))) >= F.lit(int(since[1])))
        return [{k: utc(v) for k, v in r.asDict().items()} for r in df.collect()]
