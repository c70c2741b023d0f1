"""What a plain CDC change's parse costs: one parse (operation and ordering read from the row's
``from_json``) against two (an envelope ``from_json`` for them, then the row's), #39.

No Kafka and no write (Spark's ``noop`` sink): the CDC benchmark's changes (``tests/fixtures/cdc_stream``,
seed 3), cached in 2 partitions, each way parsed ``--repeats`` times in one warm JVM, alternating,
after a warm-up of each. Both ways run icetide's own expressions (``icetide.ingest.cdc``): the error
classes and the CDC checks included, as a batch parses its changes. Also checks that both ways read
every change alike (the same good count, operations and orderings).

    .venv/bin/python -m benchmarks.cdc.parse_once [--changes 500000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

HERE = Path(__file__).resolve().parent

from benchmarks.ingest.run import machine  # noqa: E402
from tests.fixtures.cdc_stream import generate  # noqa: E402

ROW = "id BIGINT, name STRING, balance DOUBLE, version BIGINT, op STRING"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--changes", type=int, default=500_000)
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "parse_once")
    args = ap.parse_args()

    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StructField, StructType

    from icetide.config import load_config
    from icetide.config.target import CdcSettings
    from icetide.ingest import cdc, decode
    from icetide.ingest.formats.json import json_columns
    from icetide.spark import build_session

    work = Path(tempfile.mkdtemp(prefix="icetide-parse-once-"))
    (work / "p.yaml").write_text(yaml.safe_dump({
        "name": "parse-once", "source": {"bootstrap_servers": "127.0.0.1:9", "topics": ["unused"]},
        "catalog": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 'c.db'}", "warehouse": str(work / "wh")},
        "target": {"table": "p.unused"}, "spark": {"master": "local[2]", "conf": {"spark.driver.memory": "4g"}},
        "stream": {"checkpoint_location": str(work / "ckpt")}}))
    spark = build_session(load_config(work / "p.yaml"))
    values = [(v,) for _, v in generate(args.keys, args.changes, seed=3, debezium=False).messages if v is not None]
    rows = (spark.createDataFrame(values, StructType([StructField("value", BinaryType())]))
            .repartition(2).persist(StorageLevel.MEMORY_AND_DISK_DESER))
    rows.count()
    schema = StructType.fromDDL(ROW)
    assert isinstance(schema, StructType)
    settings = CdcSettings(primary_key=["id"], ordering="version")
    assert cdc.reads_row(settings, schema)
    columns = json_columns(spark.sparkContext.applicationId, schema.json(), 1 << 20)

    def two() -> DataFrame:  # the envelope parsed for the operation and ordering, then the row
        return decode.parse(cdc.unwrap(rows, settings), columns, [cdc.errors(settings, decode.PARSED)])

    def one() -> DataFrame:  # the row parsed once, the operation and ordering read from it
        fields = cdc.row_fields(settings, decode.PARSED)
        return decode.parse(rows, columns, [cdc.errors(settings, decode.PARSED, fields)]).withColumns(
            {cdc.OP: fields[1], cdc.ORDERING: fields[2]})

    def out(make: Callable[[], DataFrame]) -> DataFrame:
        return make().select(f"{decode.PARSED}.*", cdc.OP, cdc.ORDERING, decode.ERROR_CLASS)

    def timed(make: Callable[[], DataFrame]) -> float:
        t0 = time.perf_counter()
        out(make).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0

    def census(make: Callable[[], DataFrame]) -> dict[str, int]:
        r = out(make).agg(F.count_if(F.col(decode.ERROR_CLASS).isNull()).alias("good"),
                          F.count_if(F.col(cdc.OP) == "delete").alias("deletes"),
                          F.sum(F.col(cdc.ORDERING)).alias("ordering")).first()
        assert r is not None
        return {k: int(v) for k, v in r.asDict().items()}

    sums = [census(two), census(one)]
    assert sums[0] == sums[1] and sums[0]["good"] == len(values), sums
    for make in (two, one):  # warm-up
        timed(make)
    seconds: dict[str, list[float]] = {"two parses": [], "one parse": []}
    for _ in range(args.repeats):
        seconds["two parses"].append(timed(two))
        seconds["one parse"].append(timed(one))
    spark.stop()
    median = {k: statistics.median(v) for k, v in seconds.items()}
    report = {"machine": machine(), "changes": len(values), "repeats": args.repeats,
              "seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
              "median_s": {k: round(v, 3) for k, v in median.items()},
              "one_over_two": round(median["one parse"] / median["two parses"], 3), "read_alike": sums[0]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=1))
    m = report["machine"]
    lines = [
        "# A plain CDC change parsed once or twice (#39)", "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Spark {m['spark']} (local[2]). "
        f"{len(values):,} changes of the CDC benchmark, cached; each way run {args.repeats} times, alternating, "
        "in one warm JVM, into Spark's `noop` sink. Both ways read every change alike "
        f"({sums[0]['good']:,} good, {sums[0]['deletes']:,} deletes, the same orderings).", "",
        "| way | median s | runs (s) | changes/s |", "|---|---:|---|---:|",
        *[f"| {k} | {median[k]:.3f} | {', '.join(f'{x:.2f}' for x in v)} | {len(values) / median[k]:,.0f} |"
          for k, v in seconds.items()],
        "", f"One parse takes **{report['one_over_two']:.2f}×** the time of two.", ""]
    (args.out / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
