"""Decoded Avro records as table rows: semantic conversions after decoding, a Debezium envelope's
row, projection onto a table's columns. Spark columns only (no driver state).

:func:`converted` applies a writer schema's conversions (:data:`.avro_semantic.CONVERTED`) to the
struct ``from_avro`` decoded; a value a conversion cannot take (a ``ZonedTimestamp`` that is not
ISO-8601) makes the record's ``__icetide_ok`` null, so the record is a dead letter
(``undecodable``), never a row with a null in place of the value.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from icetide.config.target import CdcSettings
from icetide.ingest.formats.base import OK as OK  # every reader schema adds it (see :mod:`.avro`)


def converted(decoded: Column, t: StructType, conversions: dict[tuple[str, ...], str]) -> Column:
    """``decoded`` (a struct of type ``t`` plus :data:`OK`) with each path of ``conversions``
    converted; :data:`OK` null when a conversion failed on a value that is there."""
    if not conversions:
        return decoded
    failed = F.lit(False)
    for path, kind in conversions.items():
        src = _at(decoded, path)
        failed = failed | (src.isNotNull() & _CONVERT[kind](src).isNull())
    fields = [_rebuild(decoded[f.name], f.dataType, (f.name,), conversions).alias(f.name) for f in t.fields]
    return F.when(decoded.isNotNull(), F.struct(*fields, F.when(~failed, decoded[OK]).alias(OK)))


def _at(col: Column, path: tuple[str, ...]) -> Column:
    for part in path:
        col = col[part]
    return col


def _rebuild(col: Column, t: DataType, path: tuple[str, ...], conversions: dict[tuple[str, ...], str]) -> Column:
    kind = conversions.get(path)
    if kind is not None:
        return _CONVERT[kind](col)
    if not isinstance(t, StructType) or not any(len(p) > len(path) and p[:len(path)] == path for p in conversions):
        return col
    return F.when(col.isNotNull(), F.struct(*[_rebuild(col[f.name], f.dataType, (*path, f.name), conversions)
                                              .alias(f.name) for f in t.fields]))


def _nanos_ntz(v: Column) -> Column:
    """Epoch nanoseconds (a local date-time as Debezium writes it) → timestamp without zone, to the µs."""
    micros = F.floor(v.cast("decimal(20,0)") / F.lit(1000)).cast("long")
    return F.timestamp_add("MICROSECOND", micros, F.lit("1970-01-01 00:00:00").cast("timestamp_ntz"))


def _zoned(v: Column) -> Column:
    """ISO-8601 text with an offset → timestamp with zone (null when it is not a timestamp)."""
    return v.try_cast("timestamp")


def _variable_decimal(v: Column) -> Column:
    """Debezium's ``{scale, value}`` (value: the unscaled integer) → the exact decimal as text."""
    unscaled, scale = v["value"], v["scale"]
    digits = F.abs(unscaled).cast("string")
    sign = F.when(unscaled < 0, F.lit("-")).otherwise(F.lit(""))
    padded = F.lpad(digits, F.greatest(F.length(digits), scale + 1), "0")
    cut = F.length(padded) - scale
    fraction = F.concat(padded.substr(F.lit(1), cut), F.lit("."), padded.substr(cut + 1, scale))
    text = (F.when(scale <= 0, F.concat(digits, F.repeat(F.lit("0"), -scale))).otherwise(fraction))
    return F.when(unscaled.isNotNull() & scale.isNotNull(), F.concat(sign, text))


_CONVERT = {"nanos_ntz": _nanos_ntz, "zoned": _zoned, "variable_decimal": _variable_decimal}


def row_type(decoded: StructType, cdc: CdcSettings | None) -> StructType | None:
    """The table row inside a decoded record: the record itself, or a Debezium envelope's ``after``
    (``before`` when a schema lacks it); None when a Debezium schema has neither."""
    if cdc is None or cdc.format != "debezium":
        return decoded
    for name in ("after", "before"):
        f = next((f for f in decoded.fields if f.name == name), None)
        if f is not None and isinstance(f.dataType, StructType):
            return f.dataType
    return None


def op_path(cdc: CdcSettings) -> str:
    return "op" if cdc.format == "debezium" else cdc.operation_field


def row(decoded: Column, t: StructType, cdc: CdcSettings | None) -> Column:
    if cdc is None or cdc.format != "debezium":
        return decoded
    op = decoded["op"] if has_path(t, ["op"]) else F.lit(None).cast("string")
    after = decoded["after"] if has_path(t, ["after"]) else F.lit(None)
    before = decoded["before"] if has_path(t, ["before"]) else after
    return F.when(op.isin(cdc.delete_values), before).otherwise(after)


def pick(decoded: Column, t: StructType, path: str) -> Column:
    if not has_path(t, path.split(".")):
        return F.lit(None).cast("string")
    out = decoded
    for part in path.split("."):
        out = out[part]
    return out


def has_path(t: DataType, parts: list[str]) -> bool:
    for part in parts:
        if not isinstance(t, StructType):
            return False
        match = [f for f in t.fields if f.name.lower() == part.lower()]
        if not match:
            return False
        t = match[0].dataType
    return True


def declares(t: DataType, parts: tuple[str, ...]) -> bool:
    """Whether type ``t`` has a field at ``parts`` (names matched ignoring case, as the projection
    matches them: ``Email`` in one version and ``email`` in another are one column; ``element`` and
    ``value`` step into lists and maps)."""
    for part in parts:
        if isinstance(t, ArrayType) and part == "element":
            t = t.elementType
        elif isinstance(t, MapType) and part == "value":
            t = t.valueType
        elif isinstance(t, StructType) and (match := [f for f in t.fields if f.name.lower() == part.lower()]):
            t = match[0].dataType
        else:
            return False
    return True


def project(col: Column, have: StructType, want: StructType) -> dict[str, Column]:
    """``col`` (a struct of type ``have``) as the columns of ``want``, by name ignoring case: fields
    ``have`` lacks are null, types cast to the table's (only widenings reach here, see
    :func:`.avro_types.fit`)."""
    by_name = {f.name.lower(): f for f in have.fields}
    out: dict[str, Column] = {}
    for f in want.fields:
        mine = by_name.get(f.name.lower())
        out[f.name] = (_convert(col[mine.name], mine.dataType, f.dataType) if mine is not None
                       else F.lit(None).cast(f.dataType)).alias(f.name)
    return out


def _convert(col: Column, have: DataType, want: DataType) -> Column:
    if have == want:
        return col
    if isinstance(want, StructType) and isinstance(have, StructType):
        return F.when(col.isNotNull(), F.struct(*project(col, have, want).values()))
    if isinstance(want, ArrayType) and isinstance(have, ArrayType):
        return F.transform(col, lambda e: _convert(e, have.elementType, want.elementType))
    if isinstance(want, MapType) and isinstance(have, MapType):
        return F.transform_values(col, lambda _, v: _convert(v, have.valueType, want.valueType))
    return col.cast(want)
