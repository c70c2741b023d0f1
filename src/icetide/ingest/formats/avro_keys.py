"""Avro record keys (``source.key_format: avro``): each key decoded through the registry with its
own writer schema (any Avro type: a record such as Debezium's key struct, or a primitive) into JSON
text for ``_kafka_key``; a key that is not in the wire format, names an unknown schema id or does
not decode makes its record a dead letter that keeps the key's original bytes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column
from pyspark.sql import functions as F

import icetide.ingest.formats.avro_refs as avro_refs
import icetide.ingest.formats.avro_types as avro_types
from icetide.ingest.formats.base import OK
from icetide.ingest.formats.registry import RegistryClient, SchemaRefused, UnknownSchemaId
from icetide.ingest.formats.wire import UNKNOWN_RETRY_S, payload

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

KEY_ID = "_icetide_key_schema_id"
#: A record's Avro key as JSON text (null when it has no key or the key does not decode).
KEY_TEXT = "_icetide_key_text"
_SENTINEL = {"name": OK, "type": "boolean", "default": True}


def with_sentinel(schema: Any) -> str:
    """A record reader schema with one more field no writer has (see :mod:`.avro`)."""
    return json.dumps({**schema, "fields": [*schema.get("fields", []), _SENTINEL]}, separators=(",", ":"))


@dataclass
class Keys:
    """The key schemas of one pipeline run. A key schema the registry refuses is refused for the run;
    a 404 is believed for :data:`~.wire.UNKNOWN_RETRY_S` (a follower registry can lag a registration),
    then asked again; the verdict names only the batch's ids, so keys that only look like the wire
    format never grow the plan batch after batch."""

    schemas: dict[int, str] = field(default_factory=dict)  # key schema id → its writer schema's text
    unknown: dict[int, str] = field(default_factory=dict)  # id → why it cannot decode keys (for the run)
    absent: dict[int, float] = field(default_factory=dict)  # id → when the registry answered 404
    batch_ids: list[int] = field(default_factory=list)

    def resolve(self, client: RegistryClient, rows: DataFrame) -> None:
        """Learn the batch's key schema ids (references written out, see :mod:`.avro_refs`)."""
        ids = sorted(int(r[0]) for r in rows.select(KEY_ID).where(F.col(KEY_ID).isNotNull()).distinct().collect())
        self.learn(client, ids, time.monotonic())

    def learn(self, client: RegistryClient, ids: list[int], now: float) -> None:
        for kid in ids:
            if kid in self.schemas or kid in self.unknown or now - self.absent.get(kid, -UNKNOWN_RETRY_S) < \
                    UNKNOWN_RETRY_S:
                continue
            try:
                got = client.schema(kid)
                if got.get("schemaType", "AVRO") != "AVRO":
                    raise avro_types.UnsupportedSchema(f"key schema id {kid} is not an Avro schema")
                refs = got.get("references") or []
                schemas, union = avro_refs.resolved(client, kid, str(got.get("schema", "")),
                                                    refs if isinstance(refs, list) else [refs])
            except UnknownSchemaId:
                self.absent[kid] = now
                continue
            except (SchemaRefused, avro_types.UnsupportedSchema) as e:
                self.unknown[kid] = f"key schema id {kid}: {e}"
                continue
            if union:
                self.unknown[kid] = f"key schema id {kid} is a union of records, which keys cannot be"
                continue
            self.absent.pop(kid, None)
            self.schemas[kid] = json.dumps(schemas[0], separators=(",", ":"))
        self.batch_ids = ids

    def refusals(self) -> list[tuple[int, str]]:
        """The batch's key schema ids that cannot decode keys, each with why (only the batch's)."""
        out = []
        for i in self.batch_ids:
            if i in self.unknown:
                out.append((i, self.unknown[i]))
            elif i not in self.schemas and i in self.absent:
                out.append((i, f"key schema id {i} is not in the schema registry (HTTP 404)"))
        return out

    def text(self) -> Column:
        """The key as JSON text (a primitive key as its text); null when it does not decode."""
        from pyspark.sql.avro.functions import from_avro

        kid = F.col(KEY_ID)
        out = F.lit(None).cast("string")
        for i in self.batch_ids:
            text = self.schemas.get(i)
            if text is None:
                continue
            schema = json.loads(text)
            if isinstance(schema, dict) and schema.get("type") == "record":
                dec = from_avro(payload("_kafka_key"), text, {"mode": "PERMISSIVE", "avroSchema": with_sentinel(schema),
                                                              **avro_types.SPARK_OPTIONS})
                value = F.when(dec[OK].isNotNull(), F.to_json(dec.dropFields(OK)))
            else:
                dec = from_avro(payload("_kafka_key"), text, {"mode": "PERMISSIVE", **avro_types.SPARK_OPTIONS})
                # a primitive as its JSON text: to_json of a one-element array, brackets cut
                value = F.when(dec.isNotNull(), F.regexp_extract(F.to_json(F.array(dec)), r"^\[(.*)\]$", 1))
            out = F.when(kid == F.lit(i), value).otherwise(out)
        return out

    def verdict(self) -> Column:
        """Dead-letter class and message for a key that is not Avro in the wire format or does not decode."""
        k, kid = F.col("_kafka_key"), F.col(KEY_ID)
        out = (F.when(k.isNull() | (F.length(k) == 0), F.lit(None).cast("string"))
               .when(kid.isNull(), F.lit("undecodable\tthe key is not in the Confluent Avro wire format "
                                         "(source.key_format: avro)")))
        for i, why in self.refusals():
            out = out.when(kid == F.lit(i), F.lit(f"unknown_schema_id\t{why}"))
        return out.when(F.col(KEY_TEXT).isNull(), F.concat(
            F.lit("undecodable\tthe key does not decode with its writer schema id "), kid.cast("string")))
