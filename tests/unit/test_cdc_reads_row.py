"""Which plain changes are parsed once, their operation and ordering read from the row's parse
(:func:`icetide.ingest.cdc.reads_row`); the integration tier's ``test_cdc_parse`` shows both ways read
every change the same where this says yes."""

from __future__ import annotations

from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType, TimestampType

from icetide.config.target import CdcSettings
from icetide.ingest import cdc, names


def schema(**columns: DataType) -> StructType:
    return StructType([StructField(k, v, True) for k, v in columns.items()])


LONG = schema(id=LongType(), op=StringType(), version=LongType())
PLAIN = CdcSettings(primary_key=["id"], ordering="version")


def test_a_string_operation_and_an_ordering_column_of_the_ordering_type_are_read_from_the_row() -> None:
    assert cdc.reads_row(PLAIN, LONG)
    text = CdcSettings(primary_key=["id"], ordering="version", ordering_type="string")
    assert cdc.reads_row(text, schema(id=LongType(), op=StringType(), version=StringType()))
    custom = CdcSettings(primary_key=["id"], ordering="seq", operation_field="kind")
    assert cdc.reads_row(custom, schema(id=LongType(), kind=StringType(), seq=LongType()))


def test_anything_else_keeps_the_envelope_parse() -> None:
    assert not cdc.reads_row(PLAIN, schema(id=LongType(), op=StringType(), version=StringType()))
    assert not cdc.reads_row(PLAIN, schema(id=LongType(), op=LongType(), version=LongType()))
    assert not cdc.reads_row(PLAIN, schema(id=LongType(), version=LongType()))  # no operation column
    assert not cdc.reads_row(PLAIN, schema(id=LongType(), Op=StringType(), version=LongType()))  # another case
    nested = CdcSettings(primary_key=["id"], ordering="meta.v")
    assert not cdc.reads_row(nested, schema(id=LongType(), op=StringType(), meta=schema(v=LongType())))
    timed = CdcSettings(primary_key=["id"], ordering="version", ordering_type="timestamp")
    assert not cdc.reads_row(timed, schema(id=LongType(), op=StringType(), version=TimestampType()))
    # a sanitized column (target.field_names: sanitize) is read from the producer's name, which the
    # envelope does not read: `op-type` in the record, `op_x2Dtype` in the table and the config
    sanitized = CdcSettings(primary_key=["id"], ordering="version", operation_field="op_x2Dtype")
    renamed = StructType([StructField("id", LongType()), StructField("version", LongType()),
                          StructField("op_x2Dtype", StringType(), True, {"comment": f"{names.ORIGINAL}op-type"})])
    assert not cdc.reads_row(sanitized, renamed)
    debezium = CdcSettings(primary_key=["id"], ordering="ts_ms", format="debezium")
    assert not cdc.reads_row(debezium, schema(id=LongType(), op=StringType(), ts_ms=LongType()))
