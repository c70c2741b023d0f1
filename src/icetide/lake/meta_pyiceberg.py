""":class:`~icetide.lake.meta.MetaReader` without a JVM: PyIceberg over the same catalog.

Read-only commands (status, health, plan, offsets, dead-letters list, report, the dashboard) use it,
so they answer in a fraction of a second instead of starting Spark. The catalog comes from the
catalog backend (``catalog.pyiceberg_catalog``); table answers match :mod:`icetide.lake.meta_spark`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from icetide.config.base import COLUMN_RE
from icetide.identifiers import validate_name
from icetide.lake.meta import FileBounds, Manifests, Snapshot, SpecField, partition_key, short, spec_field, utc

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from icetide.config.models import PipelineConfig

class PyIcebergMeta:
    def __init__(self, catalog: Catalog, name: str) -> None:
        self.catalog = validate_name(name)
        self._cat = catalog
        self._tables: dict[str, Table] = {}

    @classmethod
    def for_config(cls, cfg: PipelineConfig) -> PyIcebergMeta:
        from icetide.catalog import pyiceberg_catalog

        return cls(pyiceberg_catalog(cfg), cfg.catalog.name)

    def fresh(self) -> PyIcebergMeta:
        return PyIcebergMeta(self._cat, self.catalog)

    def table(self, table: str) -> Table:
        """The table as loaded once by this reader (one consistent view per command)."""
        t = short(table)
        if t not in self._tables:
            self._tables[t] = self._cat.load_table(t)
        return self._tables[t]

    def namespaces(self) -> list[str]:
        return sorted(".".join(n) for n in self._cat.list_namespaces())

    def list_tables(self, namespace: str) -> list[str]:
        from pyiceberg.exceptions import NoSuchNamespaceError

        validate_name(namespace, "namespace")
        try:
            found = self._cat.list_tables(namespace)
        except NoSuchNamespaceError:
            return []
        out = []
        for ident in found:
            name = ident[-1]
            try:
                out.append(f"{namespace}.{validate_name(name, 'table name')}")
            except Exception:
                continue
        return sorted(out)

    def exists(self, table: str) -> bool:
        return bool(self._cat.table_exists(short(table)))

    def columns(self, table: str) -> list[str]:
        return [f.name for f in self.table(table).schema().fields]

    def properties(self, table: str) -> dict[str, str]:
        return dict(self.table(table).properties)

    def partitioned(self, table: str) -> bool:
        return any(s.fields for s in self.table(table).specs().values())

    def _field_order(self, table: str) -> list[str]:
        """Partition field names of every spec, by field id (Spark's partition struct order)."""
        fields = {f.field_id: f.name for s in self.table(table).specs().values() for f in s.fields}
        return [fields[i] for i in sorted(fields)]

    def spec(self, table: str) -> list[SpecField]:
        tb = self.table(table)
        schema = tb.schema()
        out = []
        for f in tb.spec().fields:
            source = schema.find_column_name(f.source_id) or ""
            if COLUMN_RE.fullmatch(source):
                out.append(spec_field(f.name, str(f.transform), source))
        return out

    def _keys(self, table: str, parts: list[dict[str, Any] | None]) -> list[str]:
        if not self.partitioned(table):
            return [""] * len(parts)
        order = self._field_order(table)
        return [partition_key(p or {}, order) for p in parts]

    def _inspect_files(self, table: str) -> pa.Table | None:
        """PyIceberg's ``inspect.files()``; None for a snapshot without manifests (an empty commit,
        e.g. a batch that appended no rows), where PyIceberg 0.12 raises instead of listing none."""
        tb = self.table(table)
        snapshot = tb.current_snapshot()
        if snapshot is None or not snapshot.manifests(tb.io):
            return None
        return tb.inspect.files()

    def files(self, table: str) -> pa.Table:
        import pyarrow as pa

        f = self._inspect_files(table)
        if f is None:
            return pa.table({"partition": pa.array([], pa.string()), "content": pa.array([], pa.int32()),
                             "file_size_in_bytes": pa.array([], pa.int64()), "record_count": pa.array([], pa.int64())})
        return pa.table({
            "partition": pa.array(self._keys(table, f.column("partition").to_pylist()), pa.string()),
            "content": f.column("content").cast(pa.int32()),
            "file_size_in_bytes": f.column("file_size_in_bytes"),
            "record_count": f.column("record_count"),
        })

    def partition_writes(self, table: str) -> dict[str, int]:
        if not self.partitioned(table):
            return {}
        tb = self.table(table)
        at = {s.snapshot_id: s.timestamp_ms for s in tb.snapshots()}
        p = tb.inspect.partitions()
        keys = self._keys(table, p.column("partition").to_pylist())
        return {k: at[sid] for k, sid in zip(keys, p.column("last_updated_snapshot_id").to_pylist(), strict=True)
                if sid in at}

    def snapshots(self, table: str) -> list[Snapshot]:
        tb = self.table(table)
        rank: dict[int, int] = {}
        current = tb.current_snapshot()
        by_id = {s.snapshot_id: s for s in tb.snapshots()}
        sid = current.snapshot_id if current else None
        while sid is not None and sid in by_id and sid not in rank:
            rank[sid] = len(rank)
            sid = by_id[sid].parent_snapshot_id
        return [Snapshot(s.snapshot_id, s.timestamp_ms, _summary(s), rank.get(s.snapshot_id)) for s in by_id.values()]

    def manifests(self, table: str) -> Manifests:
        m = self.table(table).inspect.manifests()
        content = m.column("content").to_pylist()
        return Manifests(len(content), sum(m.column("length").to_pylist()), sum(1 for c in content if c == 1))

    def metadata_file_bytes(self, table: str) -> int | None:
        tb = self.table(table)
        try:
            return len(tb.io.new_input(tb.metadata_location))
        except FileNotFoundError:
            return None

    def file_bounds(self, table: str, column: str) -> list[FileBounds]:
        if not COLUMN_RE.fullmatch(column) or column not in self.columns(table):
            return []
        f = self._inspect_files(table)
        if f is None:
            return []
        keys = self._keys(table, f.column("partition").to_pylist())
        metrics = f.column("readable_metrics").to_pylist()
        out = []
        for key, content, size, m in zip(keys, f.column("content").to_pylist(),
                                         f.column("file_size_in_bytes").to_pylist(), metrics, strict=True):
            if content == 0:
                b = (m or {}).get(column) or {}
                out.append(FileBounds(key, int(size), utc(b.get("lower_bound")), utc(b.get("upper_bound"))))
        return out

    def rows(self, table: str, columns: list[str], since: tuple[str, int] | None = None) -> list[dict[str, Any]]:
        from datetime import UTC, datetime

        from pyiceberg.expressions import AlwaysTrue, GreaterThanOrEqual

        cols = [validate_name(c, "column") for c in columns]
        where: Any = AlwaysTrue()
        if since is not None:
            at = datetime.fromtimestamp(since[1] / 1000, UTC)
            where = GreaterThanOrEqual(validate_name(since[0], "column"), at.isoformat())  # type: ignore[call-arg,arg-type]
        data = self.table(table).scan(row_filter=where, selected_fields=tuple(cols)).to_arrow()
        return [{k: utc(v) for k, v in r.items()} for r in data.select(cols).to_pylist()]


def _summary(s: Any) -> dict[str, str]:
    """The snapshot summary as Iceberg's metadata JSON spells it, ``operation`` included."""
    if not s.summary:
        return {}
    return {"operation": str(s.summary.operation.value),
            **{str(k): str(v) for k, v in s.summary.additional_properties.items()}}
