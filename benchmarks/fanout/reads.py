"""What a table's Parquet layout costs its readers (``benchmarks.fanout.run --read``).

A write-side choice (Parquet dictionaries off, or capped small) is only worth it if readers do not
pay it back. For each one-table system's table, after every system has run: its data bytes; per
column, the share of column chunks whose data pages are all dictionary-encoded (read from the
files' footers with pyarrow: a dictionary page and no PLAIN data page); and the time of two Spark
queries, each the best of three in one session: a selective filter on a low-cardinality column and
an aggregate over every column.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

QUERIES = {
    "filter_s": "SELECT count(*) FROM {t} WHERE event_type = 't01' AND user_id < 500",
    "scan_s": "SELECT count(DISTINCT id), sum(amount), max(event_time), max(length(payload)), "
              "count(DISTINCT user_id) FROM {t}",
}
COLUMNS = ("id", "event_time", "user_id", "event_type", "amount", "payload")


def _local(path: str) -> str:
    return path.removeprefix("file://").removeprefix("file:")


def dictionary_share(files: list[str]) -> dict[str, float]:
    """Per column of :data:`COLUMNS`: the share of column chunks wholly dictionary-encoded."""
    import pyarrow.parquet as pq

    whole: dict[str, int] = dict.fromkeys(COLUMNS, 0)
    chunks: dict[str, int] = dict.fromkeys(COLUMNS, 0)
    for f in files:
        meta = pq.ParquetFile(_local(f)).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                col = group.column(c)
                name = col.path_in_schema
                if name not in chunks:
                    continue
                chunks[name] += 1
                whole[name] += int(col.has_dictionary_page and "PLAIN" not in col.encodings)
    return {c: round(whole[c] / chunks[c], 3) for c in COLUMNS if chunks[c]}


def measure(pipeline: dict[str, Any], tables: dict[str, str], work: Path, repeats: int = 3) -> dict[str, Any]:
    """``tables``: system → table (``ns.name``) in ``pipeline``'s catalog. Returns system → figures."""
    from icetide.config import load_config
    from icetide.spark import build_session

    cfg_path = work / "reads.yaml"
    cfg_path.write_text(yaml.safe_dump(pipeline))
    cfg = load_config(cfg_path)
    spark = build_session(cfg, purpose="read")
    out: dict[str, Any] = {}
    try:
        for system, table in tables.items():
            t = f"{cfg.catalog.name}.{table}"
            files = [r[0] for r in spark.sql(f"SELECT file_path FROM {t}.files").collect()]
            data_bytes = spark.sql(f"SELECT sum(file_size_in_bytes) FROM {t}.files").first()[0]
            row: dict[str, Any] = {"data_files": len(files), "data_bytes": data_bytes,
                                   "dictionary_share": dictionary_share(files)}
            for key, sql in QUERIES.items():
                best = None
                for _ in range(repeats):
                    started = time.perf_counter()
                    spark.sql(sql.format(t=t)).collect()
                    took = time.perf_counter() - started
                    best = took if best is None else min(best, took)
                row[key] = round(best or 0.0, 3)
            out[system] = row
    finally:
        spark.stop()
    return out


def markdown(reads: dict[str, Any]) -> list[str]:
    """The reads as a table of the report."""
    lines = ["", "## What readers pay (`--read`)", "",
             "Best of three in one Spark session; dictionary: share of column chunks wholly dictionary-encoded.", "",
             "| system | data MB | filter s | scan s | " + " | ".join(f"dict {c}" for c in COLUMNS) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(COLUMNS)]
    for system, r in reads.items():
        share = r["dictionary_share"]
        lines.append(f"| {system} | {r['data_bytes'] / 1e6:.1f} | {r['filter_s']:.2f} | {r['scan_s']:.2f} | "
                     + " | ".join(f"{share.get(c, 0):.2f}" for c in COLUMNS) + " |")
    return lines
