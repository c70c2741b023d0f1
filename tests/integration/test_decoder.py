"""The one pass's JSON decoder against the expression path, record for record (real Spark, no broker).

The one pass decodes each JSON value in its write task, once, from its UTF-8 bytes
(``io.icetide.spark.JsonRowDecoder``); the usual path checks it with the ``JsonScan`` UDF, then
parses it with ``from_json``. A record must come out the same either way: good or not, the same
row, the same shape. A corpus of ordinary and hostile records (seeded, the seed printed) is run
through both. Cost: about 15 s on 2 cores (one Spark session, a few thousand records).
"""

from __future__ import annotations

import codecs
import json
import os
import random
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from icetide.ingest import decode
from icetide.ingest.formats import json_scan as checks
from icetide.ingest.formats.json import json_columns
from icetide.ingest.names import RESERVED_PREFIXES
from tests.fixtures.hostile import baseline, generate

MAX_DEPTH, MAX_FIELDS, MAX_BYTES = 32, 2000, 20_000

SCHEMA = StructType.fromJson({"type": "struct", "fields": [
    {"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in [
        ("id", "string"), ("kind", "string"), ("n", "long"), ("name", "string"), ("ratio", "double"),
        ("i", "integer"), ("flag", "boolean"), ("ts", "timestamp"), ("day", "date"),
        ("amount", "decimal(10,2)"),
        ("tags", {"type": "array", "elementType": "string", "containsNull": True}),
        ("nums", {"type": "array", "elementType": "long", "containsNull": True}),
        ("attrs", {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}),
        ("c", {"type": "struct", "fields": [
            {"name": "d", "type": "double", "nullable": True, "metadata": {}},
            {"name": "e", "type": {"type": "array", "elementType": {"type": "struct", "fields": [
                {"name": "g", "type": "string", "nullable": True, "metadata": {}}]}, "containsNull": True},
             "nullable": True, "metadata": {}}]}),
        ("user-agent", "string"), ("service.name", "string"),
    ]]})

ORDINARY = [
    '{"id":"o1","n":1,"name":"x","ratio":0.5,"i":7,"flag":true}',
    '{"id":"o2","ts":"2026-11-29T10:11:12.345Z","day":"2026-11-29","amount":"12.34"}',
    '{"id":"o3","ts":"2026-11-29 10:11:12","day":"2026-02-30","amount":12.345}',
    '{"id":"o4","ts":1764411072,"amount":99999999.99,"n":-9223372036854775808}',
    '{"id":"o5","tags":["a",1,true,null,{"x":1}],"nums":[1,2,3],"attrs":{"a":1,"b":null}}',
    '{"id":"o6","c":{"d":1.5,"e":[{"g":"h"},{"g":1},{}]},"user-agent":"curl/8","service.name":"api"}',
    '{"id":"o7","name":{"nested":"object as text"},"kind":["array","as","text"]}',
    '{"id":"o8","name":123,"kind":1.50,"flag":"true","i":"7"}',
    "{'id':'o9','name':'single quotes'}",
    '  \n {"id":"o10"}  \n ',
    '{"id":"o11","name":"esc \\" \\\\ \\n \\u00e9 \\ud83d\\ude00 \\ud800"}',
    '{"id":"o12","name":"ünïcödé 日本 😀","ID2":1}',
    '{"id":"o13","ratio":1e308,"n":1.0,"i":2147483648}',
    '{"id":"o14","ratio":1e400,"amount":1e2,"nums":[1.5]}',
    '{"id":"o15","ts":"not a time","day":"tomorrow","amount":"abc"}',
    '{"id":"o16","attrs":{"a":"x"},"c":{"d":"1.5"}}',
    '{"id":"o17","c":[1,2],"tags":"not an array","attrs":[1]}',
    '{"id":"o18","unknown":{"deep":[{"x":[1,2,{"y":null}]}]},"n":null}',
    '{}',
    '{"id":"o20","n":-0,"ratio":-0.0,"i":-2147483648}',
    '{"id":"o21","name":"x"} trailing',
    '{"id":"o22","name":"x"} {"id":"o23"}',
    '{"id":"o24","name":"x"}\n',
    '{"id":"o25","nums":[9223372036854775808]}',
    '{"id":"o26","n":00012}',
    '{"id":"o27",/*comment*/"n":1}',
    '{id:"o28"}',
    '{"id":"o29","name":"tab\there"}',
    '{"id":"o30","n":+1}',
    '{"id":"o31","flag":TRUE}',
    '[{"id":"o32"}]', "42", '"a string"', "null", "true", "", "   ", "{", '{"id":', "}", "{}}",
    '{"id":"o33","c":{"d":1.5,"D":2.5}}',
    '{"id":"o34","Id":"dup by case"}',
    '{"id":"o35","id":"dup"}',
    '{"id":"o36","_kafka_topic":"x"}', '{"id":"o37","_Icetide_x":1}', '{"id":"o38","c":{"_kafka_x":1}}',
    '{"id":"o39","":1}',
    '{"id":"o40","ratio":NaN}', '{"id":"o41","ratio":-Infinity}',
    '{"id":"o42","x":' + '[' * 40 + ']' * 40 + '}',
    '{"id":"o43","x":' + '[' * 30 + ']' * 30 + '}',
    '{"id":"o44","x":"' + "y" * (MAX_BYTES + 10) + '"}',
    '{"id":"o45","amount":12345678901.5}',
    '{"id":"o46","ts":"2026-11-29T10:11:12+05:30","day":"2026-11-29T23:00:00"}',
    # a string column given a number, an object or an array keeps what from_json keeps (its own rendering)
    '{"id":"o47","name":1e2,"kind":-0}', '{"id":"o48","name":{"a": 1, "b": [1, 2]}}',
    "{\"id\":\"o49\",\"name\":{'a':'b'}}", '{"id":"o50","name":{"e":"😀","x":"\\u0041"}}',
    '{"id":"o51","name":1e300,"kind":1.0E-5}', '{"id":"o52","tags":[1.50, {"a": [true]}]}',
]

RAW: list[tuple[str, bytes | None]] = [
    ("null value", None),
    ("bom", codecs.BOM_UTF8 + b'{"id":"b1","name":"bom"}'),
    ("utf-16", '{"id":"u16","name":"x"}'.encode("utf-16-le")),
    ("utf-16 bom", '{"id":"u16b","name":"x"}'.encode("utf-16")),
    ("utf-32", '{"id":"u32"}'.encode("utf-32-be")),
    ("bad utf-8 in a name", b'{"id":"x1","na\xffme":1}'),
    ("bad utf-8 in a skipped value", b'{"id":"x2","zzz":"a\xc3"}'),
    ("bad utf-8 after the object", b'{"id":"x3"}\xff'),
    ("overlong utf-8", b'{"id":"x4","name":"\xc0\xaf"}'),
    ("surrogate as utf-8", b'{"id":"x5","name":"\xed\xa0\x80"}'),
    ("nul byte", b'{"id":"x6","name":"a\x00b"}'),
    ("latin-1", '{"id":"x7","name":"é"}'.encode("latin-1")),
]


def _usual(df: DataFrame) -> DataFrame:
    """The expression path: the checks UDF, then from_json with icetide's error rules."""
    spark = df.sparkSession
    scan = checks.scan(spark, F.col("value"), MAX_DEPTH, MAX_FIELDS)
    assert scan is not None, "icetide's JVM classes are not loaded (icetide setup builds them)"
    parsed = decode.parse(df.withColumn(checks.SCAN, scan),
                          json_columns(spark.sparkContext.applicationId, SCHEMA.json(), MAX_BYTES))
    good = F.col(checks.SCAN)["check"].isNull() & decode.is_good()
    row = F.struct(*[F.col(decode.PARSED)[f.name].alias(f.name) for f in SCHEMA.fields])
    return parsed.select("key", good.alias("good"), F.col(checks.SCAN)["shape"].alias("shape"),
                         F.when(good, row).alias("row"))


def _decoded(df: DataFrame) -> DataFrame:
    spark = df.sparkSession
    jvm: Any = spark._jvm
    prefixes = spark.sparkContext._gateway.new_array(jvm.java.lang.String, len(RESERVED_PREFIXES))  # type: ignore[union-attr]
    for i, p in enumerate(RESERVED_PREFIXES):
        prefixes[i] = p
    tz = spark.conf.get("spark.sql.session.timeZone")
    jdf = jvm.io.icetide.spark.JsonDecoding.decode(df._jdf, SCHEMA.json(), tz, MAX_DEPTH, MAX_FIELDS, prefixes,
                                                    MAX_BYTES)
    return DataFrame(jdf, spark)


def _corpus(seed: int) -> list[tuple[str, bytes | None]]:
    rng = random.Random(seed)
    out: list[tuple[str, bytes | None]] = [(f"ordinary {i}: {v[:40]}", v.encode()) for i, v in enumerate(ORDINARY)]
    out += RAW
    hostile = baseline(200, seed).values + generate(1500, seed + 1, 1000, MAX_DEPTH).values
    out += [(f"hostile {i}", v) for i, v in enumerate(hostile)]
    # ordinary records: a value of the column's type in most columns, now and then one of another type
    typed: dict[str, list[object]] = {
        "string": ["", "x", "2026-01-02", 5, 1.5, True, {"a": 1}, ["a"]],
        "bigint": [0, -1, 2**62, -(2**63)], "double": [1.5, 0, -0.0, 1e300, 7], "int": [0, 2**31 - 1, -5],
        "boolean": [True, False],
        "timestamp": ["2026-01-02T03:04:05Z", "2026-01-02 03:04:05", "2026-01-02", 1764411072],
        "date": ["2026-01-02", "2026-1-2"], "decimal(10,2)": ["12.5", 1.25, 99999999.99, 3],
        "array<string>": [[], ["a", 1], [None]], "array<bigint>": [[1, 2], [], [None]],
        "map<string,bigint>": [{"a": 1}, {}, {"b": None}],
    }
    mixed: list[object] = [0, 2**63, 1.5, "x", "12.5", True, [], [1, "a"], {}, {"a": 1}]
    for i in range(1500):
        rec: dict[str, object] = {}
        for f in SCHEMA.fields:
            if rng.random() < 0.4:
                continue
            if rng.random() < 0.04:
                rec[f.name] = rng.choice(mixed)
            elif rng.random() < 0.1:
                rec[f.name] = None
            else:
                rec[f.name] = rng.choice(typed.get(f.dataType.simpleString(), [{"d": 2.5, "e": [{"g": "h"}, {}]}, {}]))
        rec["id"] = f"r{i}"
        text = json.dumps(rec, separators=(",", ":"), ensure_ascii=rng.random() < 0.5)
        out.append((f"random {i}", text.encode()))
    return out


def test_the_decoder_reads_every_record_as_the_expression_path_does(spark) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("ICETIDE_TEST_SEED", random.randrange(2**31)))
    print(f"seed={seed} (ICETIDE_TEST_SEED={seed} repeats this run)")
    corpus = _corpus(seed)
    df = spark.createDataFrame(corpus, StructType([StructField("key", StringType()),
                                                   StructField("value", BinaryType())])).repartition(3)
    usual = {r["key"]: r for r in _usual(df).collect()}
    decoded = {r["key"]: r for r in _decoded(df).collect()}
    assert set(usual) == set(decoded) == {k for k, _ in corpus}
    differ = [(k, usual[k], decoded[k]) for k, _ in corpus
              if (usual[k]["good"], usual[k]["shape"], usual[k]["row"])
              != (decoded[k]["good"], decoded[k]["shape"], decoded[k]["row"])]
    assert not differ, "\n".join(f"{k}: expressions {u} / decoder {d}" for k, u, d in differ[:10])
    # the corpus means something: both kinds of outcome, rows with values in nested and typed columns
    goods = [k for k in usual if usual[k]["good"]]
    assert len(goods) > 800 and len(corpus) - len(goods) > 800, (len(goods), len(corpus))
    assert sum(1 for k in goods if k.startswith("random")) > 100
    assert decoded["ordinary 1: " + ORDINARY[1][:40]]["row"]["ts"] is not None
    assert decoded["ordinary 5: " + ORDINARY[5][:40]]["row"]["c"]["e"][0]["g"] == "h"
    assert decoded["ordinary 5: " + ORDINARY[5][:40]]["row"]["user-agent"] == "curl/8"
    assert not decoded["bad utf-8 in a skipped value"]["good"]
    assert len({decoded[k]["shape"] for k in goods}) > 50


ROUTE_RECORDS = [
    '{"kind":"k1","id":"a"}', '{"kind":"K2"}', "{'kind':'k1'}", '{"kind":"k1","note":"it\'s"}',
    '{"kind":"k1"} trailing', '{"kind":5}', '{"kind":true}', '{"kind":null}', '{"kind":1.5}', '{"kind":""}',
    '{"kind":"k\\u0031"}', '{"kind":"k1","ratio":NaN}', '{"x":[{"kind":"k1"}]}', '{"kind":"kß"}',
    '{"kind":"' + "k" * 65 + '"}', '{"kind":"select"}', '{"kind":"k1_tombstones"}', '{"kind":["k1"]}',
    '{"kind":{"k":1}}', '{"meta":{"tenant":"t9"},"kind":"k3"}', '{"meta":{"tenant":5}}', '{"meta":"t9"}',
    '{"meta":[{"tenant":"t9"}]}', '{"meta":{"tenant":"T8","tenant2":"x"}}', '{"kind":"k1","kind":"k2"}',
    '{"KIND":"k1"}', '{"kind":"k1","Kind":"k2"}', '{"kind":"../etc"}', '{"kind":"k1"', '[{"kind":"k1"}]',
]


def _routed(spark: Any, corpus: list[tuple[str, bytes | None]], route: Any, topic: str) -> None:
    """The decoder's routing against ``routing.with_route``'s, record for record."""
    from icetide.config.target import TargetTable
    from icetide.ingest import routing

    target = TargetTable(route=route)
    reserved = {"rt.dead_letters", "rt.k0"}
    df = spark.createDataFrame([(k, v, topic) for k, v in corpus],
                               "key STRING, value BINARY, _kafka_topic STRING").repartition(3)
    plain = routing.with_route(df, target, reserved, MAX_BYTES)
    expected = {r["key"]: r[routing.TABLE] for r in plain.select("key", routing.TABLE).collect()}
    names = sorted({t for t in expected.values() if t is not None} | {"rt.k0", "rt.select"})
    tables = [t if routing.allowed_table(route, t, reserved) else None for t in names]
    jvm: Any = spark._jvm
    gw: Any = spark.sparkContext._gateway

    def arr(xs: list[Any]) -> Any:
        out = gw.new_array(jvm.java.lang.String, len(xs))
        for i, x in enumerate(xs):
            out[i] = x
        return out

    ns_pieces, table_pieces = routing.template_pieces(route)
    jdf = jvm.io.icetide.spark.JsonDecoding.decodeRouted(
        df._jdf, SCHEMA.json(), spark.conf.get("spark.sql.session.timeZone"), MAX_DEPTH, MAX_FIELDS,
        arr(list(RESERVED_PREFIXES)), MAX_BYTES, arr(route.name.split(".")), arr(ns_pieces), arr(table_pieces),
        arr(tables), routing.table_column(route, reserved, MAX_BYTES)._jc)
    got = {r["key"]: r for r in DataFrame(jdf, spark).collect()}
    allowed = {t for t in tables if t is not None}
    differ = [(k, expected[k], got[k]["table"], got[k]["sure"]) for k, _ in corpus
              if (expected[k] if expected[k] in allowed else None) != got[k]["table"]]
    assert not differ, f"{route.name}: " + "\n".join(f"{k}: with_route {e} / decoder {g} (sure={s})"
                                                     for k, e, g, s in differ[:10])
    sure = sum(1 for r in got.values() if r["sure"])
    assert sure > len(corpus) // 4, sure  # the decoder's own reading, not only the fallback, is compared
    assert sum(1 for k in got if got[k]["table"] is not None) > 100


def test_the_decoder_routes_every_record_as_routing_does(spark) -> None:  # type: ignore[no-untyped-def]
    """Routing by a JSON field read from the decoder's own token stream (the one pass's fan-out):
    each record gets the table ``routing.with_route`` gives it, or none of the pass's tables, for
    ordinary, hostile and routing-specific records; two routes: a top-level field and a nested one
    with the topic in the template."""
    from icetide.config.target import RouteSettings

    seed = int(os.environ.get("ICETIDE_TEST_SEED", random.randrange(2**31)))
    print(f"seed={seed} (ICETIDE_TEST_SEED={seed} repeats this run)")
    corpus = _corpus(seed) + [(f"route {i}: {v[:30]}", v.encode()) for i, v in enumerate(ROUTE_RECORDS)]
    _routed(spark, corpus, RouteSettings(by="field", name="kind", table="rt.{value}"), "Orders.EU-1")
    rng = random.Random(seed)
    nested = [(f"nested {i}", json.dumps({"meta": {"tenant": rng.choice(["a1", "B2", "c_3", "", "x.y", 7])},
                                          "id": str(i)}).encode()) for i in range(300)]
    _routed(spark, corpus + nested, RouteSettings(by="field", name="meta.tenant", table="rt.{topic}_{value}"),
            "Orders.EU-1")
