"""The Confluent wire format the registry formats share (Avro, JSON Schema): byte 0, a 4-byte
big-endian schema id, then the payload. Here: each record's schema id (:data:`ID`), the payload,
the batch's ids, and the verdict on records no schema can read (the header, an id the registry
does not know, a schema it refused).

One :data:`ID` column serves every registry format of a pipeline: each sets it for its own
records and keeps the others' (:func:`with_ids`), so the batch's tables list their ids in one pass
(:mod:`icetide.ingest.prepare`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql import Column
from pyspark.sql import functions as F

from icetide.ingest.formats.avro_types import UnsupportedSchema
from icetide.ingest.formats.registry import RegistryClient, SchemaRefused, UnknownSchemaId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)
T = TypeVar("T")

ID = "_icetide_schema_id"
#: The dead-letter classes of :func:`verdict`
ERROR_CLASSES = ("truncated_record", "bad_magic_byte", "unknown_schema_id", "unsupported_schema")
#: How long a 404 for a schema id is believed: a follower registry can lag a fresh registration
UNKNOWN_RETRY_S = 60.0


def schema_id(column: str = "value") -> Column:
    """The record's schema id; null when the value (or key) is not in the wire format."""
    v = F.col(column)
    return F.when((F.length(v) >= 5) & (F.hex(F.substring(v, 1, 1)) == F.lit("00")),
                  F.conv(F.hex(F.substring(v, 2, 4)), 16, 10).cast("long"))


def payload(column: str = "value") -> Column:
    """What follows the 5-byte header."""
    return F.substring(F.col(column), 6, 2**31 - 1)


def with_ids(rows: DataFrame, mine: Column | None) -> DataFrame:
    """``rows`` with :data:`ID` set for the records ``mine`` selects (all when None), keeping the ids
    another registry format already set for its own records."""
    if mine is None:
        return rows.withColumn(ID, schema_id())
    kept = F.col(ID) if ID in rows.columns else F.lit(None).cast("long")
    return rows.withColumn(ID, F.when(mine, schema_id()).otherwise(kept))


def ids_of(rows: DataFrame, mine: Column | None) -> list[int]:
    """The distinct schema ids of the records ``mine`` selects (one small job over the batch)."""
    picked = rows if mine is None else rows.where(mine)
    return sorted(int(r[0]) for r in picked.select(F.col(ID).alias("i")).where(F.col("i").isNotNull())
                  .distinct().collect())


def value_faults(max_value_bytes: int) -> tuple[Column, Column]:
    """(class, message) for a value no registry format decodes at all: none (a tombstone), empty, or
    over ``source.max_value_bytes``; null otherwise. Callers chain their own classes after these."""
    v = F.col("value")
    error_class = (F.when(v.isNull(), F.lit("null_value"))
                   .when(F.length(v) == 0, F.lit("empty_value"))
                   .when(F.length(v) > max_value_bytes, F.lit("oversized_value")))
    message = (F.when(v.isNull(), F.lit("the record has no value (a tombstone)"))
               .when(F.length(v) == 0, F.lit("the record value is empty"))
               .when(F.length(v) > max_value_bytes,
                     F.concat(F.lit("value of "), F.length(v).cast("string"),
                              F.lit(f" bytes exceeds source.max_value_bytes={max_value_bytes}"))))
    return error_class, message


def verdict(batch_ids: list[int], unknown: Container[int], refused: dict[int, str], wire: str, fmt: str) -> Column:
    """``"<class>\\t<message>"`` for records no schema reads (``wire``: the format's name in the
    message, ``fmt``: its ``source.format`` value); null otherwise (a null or empty value is the
    parse's to judge)."""
    v, sid = F.col("value"), F.col(ID)
    first = F.hex(F.substring(v, 1, 1))
    out = (F.when(v.isNull() | (F.length(v) == 0), F.lit(None).cast("string"))
           .when(F.length(v) < 5, F.concat(F.lit("truncated_record\tthe value has "), F.length(v).cast("string"),
                                           F.lit(" bytes, fewer than the 5 of the Confluent header (magic byte 0, "
                                                 "4-byte schema id)")))
           .when(first != F.lit("00"), F.concat(F.lit("bad_magic_byte\tthe first byte is 0x"), first,
                                                F.lit(f", not 0x00: not the Confluent {wire} wire format "
                                                      f"(source.format: {fmt})"))))
    # the batch's ids only: ids that only look like the wire format never grow the plan batch after batch
    missing = [i for i in batch_ids if i in unknown]
    if missing:
        out = out.when(sid.isin(missing), F.concat(F.lit("unknown_schema_id\tschema id "), sid.cast("string"),
                                                   F.lit(" is not in the schema registry (HTTP 404)")))
    for i in batch_ids:
        if i in refused:
            out = out.when(sid == F.lit(i), F.lit(f"unsupported_schema\t{refused[i]}"[:1000]))
    return out


def registered_text(client: RegistryClient, sid: int, kind: str, fmt: str, inline: str,
                    references: list[Any] | None = None) -> str:
    """The text of schema ``sid`` from the registry, of schema type ``kind`` (``AVRO``, ``JSON``);
    :class:`UnsupportedSchema` when the registry refuses it, it is of another type (``fmt``: the
    ``source.format`` in the message) or it has references (``inline``: how to register it instead)
    and the caller takes none (``references``: the list they are added to)."""
    try:
        got = client.schema(sid)
    except SchemaRefused as e:
        raise UnsupportedSchema(f"schema id {sid}: {e}") from None
    found = got.get("schemaType", "AVRO")
    if found != kind:
        raise UnsupportedSchema(f"schema id {sid} is {found}, not {fmt}")
    if got.get("references") and references is not None:
        references.extend(got["references"] if isinstance(got["references"], list) else [got["references"]])
    elif got.get("references"):
        raise UnsupportedSchema(f"schema id {sid} uses schema references, which icetide does not resolve yet: "
                                f"register the schema with {inline}")
    return str(got.get("schema", ""))


def learn(ids: list[int], known: Container[int], refused: dict[int, str], unknown: dict[int, float], now: float,
          make: Callable[[int], T]) -> dict[int, T]:
    """What ``make`` gives for the ids not seen yet (it fetches and checks one; :class:`UnknownSchemaId`
    or :class:`UnsupportedSchema` when it cannot). A refusal is kept in ``refused`` for the run; a 404
    in ``unknown`` (when), believed for :data:`UNKNOWN_RETRY_S`, then asked again: a follower registry
    can lag a registration."""
    learned: dict[int, T] = {}
    for sid in ids:
        if sid in known or sid in refused or now - unknown.get(sid, -UNKNOWN_RETRY_S) < UNKNOWN_RETRY_S:
            continue
        try:
            learned[sid] = make(sid)
        except UnknownSchemaId:
            log.warning("schema id %s is not in the registry: its records are dead letters (asked again after "
                        "%.0f s)", sid, UNKNOWN_RETRY_S)
            unknown[sid] = now
            continue
        except UnsupportedSchema as e:
            log.warning("schema id %s refused: %s", sid, e)
            refused[sid] = str(e)
            continue
        unknown.pop(sid, None)
    return learned
