"""Schema inference over a batch's JSON records: what :mod:`icetide.ingest.evolution` compares each
table's schema with. Spark's own JSON inference, run per table in one pass (each record wrapped in
an object keyed by its table and a nonce, so no payload can steer another table's inference), over
the batch or over a few values held by the driver."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def infer(spark: SparkSession, rows: DataFrame, table_col: str, tables: list[str],
          texts: dict[str, Column] | None = None) -> dict[str, StructType]:
    """The JSON schema of the records routed to each of ``tables``, in one pass.

    ``texts``: per table, the JSON to infer from when it is not the record value (CDC rows).
    """
    if not tables:
        return {}
    nonce = f"icetide{uuid.uuid4().hex}:"
    raw = F.col("value").cast("string")
    for table, expr in (texts or {}).items():
        raw = F.when(F.col(table_col) == F.lit(table), expr).otherwise(raw)
    text = F.trim(raw)
    wrapped = (rows.where(F.col(table_col).isin(tables) & text.startswith("{") & text.endswith("}"))
               .select(F.concat(F.lit('{"' + nonce), F.col(table_col), F.lit('":'), text, F.lit("}"))))
    jvm = spark._jvm
    assert jvm is not None
    return _read_schemas(spark, getattr(wrapped._jdf, "as")(jvm.org.apache.spark.sql.Encoders.STRING()), nonce)


def infer_values(spark: SparkSession, values: dict[str, list[str]]) -> dict[str, StructType]:
    """:func:`infer` over a few record values per table held by the driver (one per shape, see
    ``MultiTableWrite.samples``): no pass over the batch."""
    nonce = f"icetide{uuid.uuid4().hex}:"
    jvm = spark._jvm
    assert jvm is not None
    texts = jvm.java.util.ArrayList()
    for table, vs in values.items():
        for v in vs:
            v = v.strip()
            if v.startswith("{") and v.endswith("}"):
                texts.add('{"' + nonce + table + '":' + v + "}")
    if texts.size() == 0:
        return {}
    return _read_schemas(spark, spark._jsparkSession.createDataset(texts, jvm.org.apache.spark.sql.Encoders.STRING()),
                         nonce)


def _read_schemas(spark: SparkSession, strings: Any, nonce: str) -> dict[str, StructType]:
    """Spark's JSON inference over ``strings`` (a JVM ``Dataset<String>`` of ``{"<nonce><table>": record}``)."""
    jschema = (spark._jsparkSession.read().option("mode", "DROPMALFORMED").option("inferTimestamp", "true")
               .option("dropFieldIfAllNull", "true").json(strings).schema())
    root = StructType.fromJson(json.loads(jschema.json()))
    out: dict[str, StructType] = {}
    for f in root.fields:
        if f.name.startswith(nonce) and isinstance(f.dataType, StructType):
            out[f.name[len(nonce):]] = f.dataType
    return out
