"""A plain change read from its row's one parse against the envelope path, record for record (real
Spark; nothing is read from Kafka).

A plain change's operation and ordering are fields of its row: when the table has them as a string
column and a column of the ordering's type (:func:`icetide.ingest.cdc.reads_row`), the change is parsed
once and both are read from that parse; otherwise an envelope parse of their own gives them
(:func:`icetide.ingest.cdc.unwrap`). A change must come out the same either way: the same dead-letter
class and message and the same row, and a good change the same operation and ordering. A corpus of
ordinary, odd and hostile changes (seeded, the seed printed) is run through both. Cost: about 10 s on
2 cores (one Spark session).
"""

from __future__ import annotations

import json
import os
import random

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, DataType, DoubleType, LongType, StringType, StructField, StructType

from icetide.config.target import CdcSettings
from icetide.ingest import cdc, decode
from icetide.ingest.formats.json import json_columns
from tests.fixtures.hostile import baseline, generate

MAX_BYTES = 20_000

def _schema(ordering: DataType) -> StructType:
    return StructType([StructField("id", LongType()), StructField("op", StringType()), StructField("version", ordering),
                       StructField("name", StringType()), StructField("ratio", DoubleType())])


LONG, TEXT = _schema(LongType()), _schema(StringType())

ODD = [
    '{"id":1,"op":"u","version":7,"name":"x"}', '{"id":2,"op":"d","version":8}', '{"id":3,"op":"c","version":-5}',
    '{"id":4,"op":"delete","version":0}', '{"id":5,"op":"r","version":9223372036854775807}',
    '{"id":6,"op":"x","version":1}', '{"id":7,"op":1,"version":1}', '{"id":8,"op":null,"version":1}',
    '{"id":9,"version":1}', '{"id":10,"op":{"a":1},"version":1}', '{"id":11,"op":["d"],"version":1}',
    '{"id":12,"op":true,"version":1}', '{"id":13,"op":"U","version":1}', '{"id":14,"op":"u"}',
    '{"id":15,"op":"u","version":null}', '{"id":16,"op":"u","version":"7"}', '{"id":17,"op":"u","version":1.5}',
    '{"id":18,"op":"u","version":1e3}', '{"id":19,"op":"u","version":9223372036854775808}',
    '{"id":20,"op":"u","version":{"v":1}}', '{"id":21,"op":"u","version":"abc"}', '{"id":22,"op":"u","version":-0}',
    '{"op":"u","version":3}', '{"id":null,"op":"u","version":3}', '{"id":"24","op":"u","version":3}',
    '{"id":25,"op":"' + "y" * 60 + '","version":3}', '{"id":26,"op":"u","version":3,"name":{"n":[1,2]}}',
    '{"id":27,"op":"u","version":3} trailing', '{"id":28,"op":"u","version":3,"ratio":"x"}',
    '{"id":29,"Op":"u","version":3}', '{"id":30,"op":"u","Version":3}', "{'id':31,'op':'u','version':3}",
    '{"id":32,"op":"u","version":[1]}', '{"id":33,"op":"","version":3}', '{"id":34,"op":" u","version":3}',
    '[{"id":35}]', "42", '"u"', "null", "", "{", '{"id":36,"op":"u","version":3,"op":"d"}',
]


def _corpus(seed: int) -> list[tuple[str, bytes | None]]:
    rng = random.Random(seed)
    out: list[tuple[str, bytes | None]] = [(f"odd {i}: {v[:40]}", v.encode()) for i, v in enumerate(ODD)]
    out += [("null value", None), ("bad utf-8", b'{"id":40,"op":"u\xff","version":1}')]
    hostile = baseline(100, seed).values + generate(600, seed + 1, 1000).values
    out += [(f"hostile {i}", v) for i, v in enumerate(hostile)]
    ops: list[object] = ["c", "u", "d", "r", "insert", "update", "delete", "snapshot", "x", 1, None, {"a": 1}]
    orderings: list[object] = [0, 1, -7, 2**40, 2**63, 1.5, "12", "abc", None, [], {"v": 2}]
    for i in range(1200):
        rec: dict[str, object] = {"id": i if rng.random() > 0.03 else rng.choice([None, "k", 1.5])}
        if rng.random() > 0.05:
            rec["op"] = rng.choice(ops) if rng.random() < 0.3 else rng.choice(["c", "u", "d"])
        if rng.random() > 0.05:
            rec["version"] = rng.choice(orderings) if rng.random() < 0.3 else rng.randrange(10**6)
        if rng.random() < 0.7:
            rec["name"] = rng.choice(["a", 5, None, {"x": "y"}])
        if rng.random() < 0.5:
            rec["ratio"] = rng.choice([0.5, 1, "bad", None])
        out.append((f"random {i}", json.dumps(rec, separators=(",", ":")).encode()))
    return out


def _compare(frame: DataFrame, schema: StructType, settings: CdcSettings) -> dict[str, int]:
    app = frame.sparkSession.sparkContext.applicationId
    columns = json_columns(app, schema.json(), MAX_BYTES)
    envelope = decode.parse(cdc.unwrap(frame, settings), columns, [cdc.errors(settings, decode.PARSED)])
    assert cdc.reads_row(settings, schema)
    fields = cdc.row_fields(settings, decode.PARSED)
    one = decode.parse(frame, columns, [cdc.errors(settings, decode.PARSED, fields)]).withColumns(
        {cdc.OP: fields[1], cdc.ORDERING: fields[2]})
    # the verdict and the row, for every change; the operation and ordering, for the good ones (a dead
    # letter's are read by nothing: a row that does not parse keeps its other fields, so the envelope's
    # `"version":"7"` gives 7 where the row's parse gives null, a type_mismatch on both paths)
    out = [decode.ERROR_CLASS, decode.ERROR_MESSAGE, decode.PARSED, cdc.OP, cdc.ORDERING]

    def read(frame: DataFrame) -> dict[str, tuple[str, str]]:
        """key → (class, what must match, as text: a NaN in a dead letter's row equals itself)."""
        return {r["key"]: (str(r[out[0]]), repr(tuple(r[c] for c in (out if r[out[0]] is None else out[:3]))))
                for r in frame.select("key", *out).collect()}

    before, after = read(envelope), read(one)
    assert set(before) == set(after)
    differ = [(k, before[k], after[k]) for k in before if before[k] != after[k]]
    assert not differ, "\n".join(f"{k}: envelope {b} / one parse {a}" for k, b, a in differ[:10])
    classes: dict[str, int] = {}
    for cls, _ in before.values():
        classes[cls] = classes.get(cls, 0) + 1
    return classes


def test_a_plain_change_reads_the_same_from_its_row_as_from_its_envelope(spark) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("ICETIDE_TEST_SEED", random.randrange(2**31)))
    print(f"seed={seed} (ICETIDE_TEST_SEED={seed} repeats this run)")
    corpus = _corpus(seed)
    frame = spark.createDataFrame(corpus, StructType([StructField("key", StringType()),
                                                      StructField("value", BinaryType())])).repartition(3)
    frame = frame.withColumn("_kafka_key", F.lit(None).cast("binary"))
    classes = _compare(frame, LONG, CdcSettings(primary_key=["id"], ordering="version"))
    # the corpus means something: good changes and every CDC class, decided by the extra checks
    assert classes.get("None", 0) > 500, classes
    for cls in ("unknown_operation", "missing_key", "missing_ordering", "type_mismatch", "malformed_json"):
        assert classes.get(cls, 0) > 0, (cls, classes)
    text = _compare(frame, TEXT, CdcSettings(primary_key=["id"], ordering="version", ordering_type="string"))
    assert text.get("None", 0) > classes["None"], (text, classes)  # a string ordering takes any token

