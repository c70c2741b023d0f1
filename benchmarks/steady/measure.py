"""Measurements of the steady benchmark: the fully compacted copy, the query mix through Spark and
through PyIceberg (no JVM), file layout figures and write amplification."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan

from icetide.config.policy import StepName

CAT = "icetide"
COPY_NS = "bench_c"
SPECS = {"day": "days(event_time)", "hour": "hours(event_time)", "cdc": None}
SORT = {"day": "event_time", "hour": "event_time", "cdc": "id"}
TARGET = 128 * 1024 * 1024


def table_of(family: str, arm: str) -> str:
    """namespace.table of an arm: plain (unmaintained), ice (icetide), compact (fully compacted copy)."""
    return f"{COPY_NS}.{family}" if arm == "compact" else f"bench.{family}_{arm}"


def build_compacted_copy(spark: Any, family: str) -> float:
    """Copy the unmaintained table's current state, then compact (and sort) it fully; seconds taken."""
    t0 = time.monotonic()
    src, dst = f"{CAT}.{table_of(family, 'plain')}", f"{CAT}.{table_of(family, 'compact')}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CAT}.{COPY_NS}")
    spark.sql(f"DROP TABLE IF EXISTS {dst} PURGE")
    part = f"PARTITIONED BY ({SPECS[family]})" if SPECS[family] else ""
    spark.sql(f"CREATE TABLE {dst} USING iceberg {part} TBLPROPERTIES ('format-version'='2', "
              f"'write.target-file-size-bytes'='{TARGET}') AS SELECT * FROM {src}")
    spark.sql(f"CALL {CAT}.system.rewrite_data_files(table => '{dst}', strategy => 'sort', "
              f"sort_order => '{SORT[family]} ASC NULLS LAST', options => map('rewrite-all', 'true', "
              f"'target-file-size-bytes', '{TARGET}'))")
    return time.monotonic() - t0


def layout(spark: Any, family: str, arm: str) -> dict[str, Any]:
    """Data files, delete files and average data file size, overall and in the newest partition."""
    t = f"{CAT}.{table_of(family, arm)}"
    part = "to_json(partition)" if SPECS[family] else "''"
    rows = spark.sql(f"SELECT {part} p, content, count(*) n, sum(file_size_in_bytes) b FROM {t}.files "
                     "GROUP BY 1, 2").collect()
    data = {r["p"]: (int(r["n"]), int(r["b"])) for r in rows if r["content"] == 0}
    deletes = sum(int(r["n"]) for r in rows if r["content"] != 0)
    manifests = int(spark.sql(f"SELECT count(*) FROM {t}.manifests").first()[0])
    snapshots = int(spark.sql(f"SELECT count(*) FROM {t}.snapshots").first()[0])
    newest = max(data) if data else None
    files = sum(n for n, _ in data.values())
    size = sum(b for _, b in data.values())
    return {"data_files": files, "delete_files": deletes, "partitions": len(data), "manifests": manifests,
            "snapshots": snapshots,
            "avg_file_bytes": round(size / files) if files else 0,
            "max_partition_files": max((n for n, _ in data.values()), default=0),
            "newest_partition_files": data[newest][0] if newest else 0}


class CommitLedger:
    """Every snapshot of the icetide arm's tables, read through PyIceberg before expiry can drop it
    (``snapshot_max_count`` expires down to the newest 20; poll at least every minute).

    ``gaps`` counts snapshots whose parent was never seen: 0 means the ledger holds the whole history."""

    def __init__(self, catalog: SqlCatalog, families: tuple[str, ...]) -> None:
        self.catalog, self.families = catalog, families
        self.snapshots: dict[str, dict[int, tuple[int | None, bool, int]]] = {f: {} for f in families}

    def poll(self) -> None:
        for fam in self.families:
            for s in self.catalog.load_table(table_of(fam, "ice")).metadata.snapshots:
                summary = s.summary
                ingest = summary is not None and summary.get("icetide.pipeline") is not None
                added = int(summary.get("added-files-size") or 0) if summary is not None else 0
                self.snapshots[fam][s.snapshot_id] = (s.parent_snapshot_id, ingest, added)

    def ingested(self, family: str) -> int:
        return sum(b for _, ingest, b in self.snapshots[family].values() if ingest)

    def gaps(self, family: str) -> int:
        seen = self.snapshots[family]
        return sum(1 for parent, _, _ in seen.values() if parent is not None and parent not in seen)


def write_amplification(spark: Any, family: str, log_table: str, ingested: int) -> dict[str, int]:
    """Bytes the stream committed to the icetide arm (from a ``CommitLedger``) and bytes icetide's
    rewrites replaced: ``bytes_in`` of every successful data or delete-file rewrite in icetide's
    action log (the procedures' ``rewritten_bytes_count``)."""
    ice = f"{CAT}.{table_of(family, 'ice')}"
    steps = "', '".join(s.value for s in StepName if s.rewrites_data)
    by_step = {r[0]: int(r[1]) for r in spark.sql(f"""SELECT step, coalesce(sum(bytes_in), 0) FROM {CAT}.{log_table}
        WHERE table_name = '{ice}' AND outcome = 'ok' AND step IN ('{steps}') GROUP BY step""").collect()}
    return {"ingested_bytes": ingested, "rewritten_bytes": sum(by_step.values()), "by_step": by_step}


class Queries:
    """The fixed query mix, through Spark SQL and through PyIceberg; each timed as the best of 5.

    The arms are interleaved: each round runs every query once on every arm, in an order that
    rotates from round to round, so a compaction, a GC pause or an ingest batch landing during
    the measurement falls on every arm alike instead of on whichever arm was being timed."""

    ROUNDS = 5

    def __init__(self, spark: Any, catalog_db: str, warehouse: str) -> None:
        self.spark = spark
        self.py = SqlCatalog(CAT, uri=f"sqlite:///{catalog_db}", warehouse=f"file://{warehouse}")

    def run(self, family: str, arms: tuple[str, ...], point_id: Any,
            now_event: datetime) -> dict[str, dict[str, float]]:
        """Per arm, per query (``spark.<name>``, ``pyiceberg.<name>``): the best of the rounds, seconds."""
        timed: dict[str, dict[str, Callable[[], Any]]] = {}
        for arm in arms:
            timed[arm] = {}
            for name, (sql, py) in self._mix(family, arm, point_id, now_event).items():
                timed[arm][f"spark.{name}"] = lambda s=sql: self.spark.sql(s).collect()
                timed[arm][f"pyiceberg.{name}"] = py
        best: dict[str, dict[str, float]] = {arm: {} for arm in arms}
        for r in range(self.ROUNDS):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            for query in timed[arms[0]]:
                for arm in order:
                    t0 = time.perf_counter()
                    timed[arm][query]()
                    took = time.perf_counter() - t0
                    best[arm][query] = round(min(took, best[arm].get(query, took)), 4)
        return best

    def _mix(self, family: str, arm: str, point_id: Any, now: datetime) -> dict[str, tuple[str, Callable[[], Any]]]:
        ident = table_of(family, arm)
        t = f"{CAT}.{ident}"
        load = lambda: self.py.load_table(ident)  # noqa: E731 - fresh metadata on every run
        if family == "cdc":
            lo = int(point_id)
            return {
                "point": (f"SELECT * FROM {t} WHERE id = {lo}",
                          lambda: load().scan(row_filter=EqualTo("id", lo)).to_arrow()),
                "range": (f"SELECT count(*), sum(balance) FROM {t} WHERE id >= {lo} AND id < {lo + 1000}",
                          lambda: _sum(load().scan(row_filter=And(GreaterThanOrEqual("id", lo),
                                                                  LessThan("id", lo + 1000)),
                                                   selected_fields=("balance",)).to_arrow(), "balance")),
                "aggregate": (f"SELECT count(*), sum(balance) FROM {t}",
                              lambda: _sum(load().scan(selected_fields=("balance",)).to_arrow(), "balance")),
            }
        hour_ago = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
        day = now.strftime("%Y-%m-%d")
        return {
            "point": (f"SELECT * FROM {t} WHERE id = '{point_id}'",
                      lambda: load().scan(row_filter=EqualTo("id", str(point_id))).to_arrow()),
            "last_hour": (f"SELECT count(*), sum(amount) FROM {t} WHERE event_time >= TIMESTAMP '{hour_ago}'",
                          lambda: _sum(load().scan(row_filter=GreaterThanOrEqual("event_time", hour_ago + "+00:00"),
                                                   selected_fields=("amount",)).to_arrow(), "amount")),
            "day_by_type": (f"SELECT event_type, count(*), sum(amount) FROM {t} WHERE event_time >= "
                            f"TIMESTAMP '{day}T00:00:00' GROUP BY event_type",
                            lambda: load().scan(row_filter=GreaterThanOrEqual("event_time", f"{day}T00:00:00+00:00"),
                                                selected_fields=("event_type", "amount")).to_arrow()
                            .group_by("event_type").aggregate([("amount", "sum"), ("amount", "count")])),
        }


def _sum(table: Any, column: str) -> tuple[int, Any]:
    return table.num_rows, pc.sum(table[column]).as_py()


def metadata_file(spark: Any, family: str, arm: str) -> str:
    """The current metadata file of an arm's table."""
    t = f"{CAT}.{table_of(family, arm)}"
    return str(spark.sql(f"SELECT file FROM {t}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").first()[0])


def register_copy(spark: Any, name: str, metadata: str) -> str:
    """A second catalog entry over the same metadata file: the same data files, rewritten separately.

    The copy shares the source's location: it is only ever compacted (never expired or
    orphan-cleaned) and dropped without PURGE."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CAT}.{COPY_NS}")
    spark.sql(f"DROP TABLE IF EXISTS {CAT}.{COPY_NS}.{name}")
    spark.sql(f"CALL {CAT}.system.register_table(table => '{COPY_NS}.{name}', metadata_file => '{metadata}')")
    return f"{COPY_NS}.{name}"
