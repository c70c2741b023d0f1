"""Protobuf (#42) refusals that must end in dead letters, never in the run's end or its growth, without
a JVM: a schema reference the registry refuses access to (a scripted registry on localhost, the real
client), a registry answering a non-object to ``icetide check``, records naming random message
indexes (no state per index), and type changes across versions a column cannot take exactly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.types import BinaryType, DoubleType, FloatType, LongType, StringType, StructField, StructType

from icetide.config.registry import SchemaRegistry
from icetide.errors import ConfigError
from icetide.ingest.formats import avro_refs
from icetide.ingest.formats.avro_types import UnsupportedSchema, fit, merged
from icetide.ingest.formats.protobuf import ProtobufFormat
from icetide.ingest.formats.protobuf_schema import check_subjects, compile_schema
from icetide.ingest.formats.registry import RegistryClient
from tests.unit.test_protobuf_types import PAYMENT, _pb, _Registry, proto3
from tests.unit.test_registry_http import serve

pytestmark = pytest.mark.unit

DENIED = {"error_code": 40301, "message": "User is denied operation Read on Subject: money"}


@pytest.fixture
def registry() -> Iterator[str]:
    """A registry that has schema 1 (referencing subject money, version 2), 2 (its reference unknown),
    3 (an Avro schema referencing money) and 4 (no object), and denies subject money: 403, or 401
    on version 3."""
    refs = [{"name": "common/money.proto", "subject": "money", "version": 2}]
    answers: dict[str, tuple[int, Any]] = {
        "/schemas/ids/1": (200, _pb(PAYMENT, refs)),
        "/schemas/ids/2": (200, _pb(PAYMENT, [{**refs[0], "subject": "gone"}])),
        "/schemas/ids/3": (200, _pb(PAYMENT, [{**refs[0], "version": 3}])),
        "/schemas/ids/4": (200, ["not", "a", "schema"]),
        "/subjects/money/versions/2": (403, DENIED), "/subjects/money/versions/3": (401, {}),
    }
    url, _, server = serve(lambda path, auth: answers.get(path.split("?")[0], (404, {"error_code": 40401})))
    yield url
    server.shutdown()


def test_a_reference_the_registry_refuses_or_lacks_makes_its_schema_unsupported_and_the_run_goes_on(
        registry: str) -> None:
    client = RegistryClient(SchemaRegistry(url=registry, max_wait_s=0))
    with pytest.raises(UnsupportedSchema) as e:
        compile_schema(client, 1)
    assert str(e.value) == ("schema id 1: reference 'common/money.proto' (subject 'money' version 2): the registry "
                            "refuses access to it (HTTP 403: User is denied operation Read on Subject: money)")
    with pytest.raises(UnsupportedSchema, match=r"version 3\): the registry refuses access to it \(HTTP 401"):
        compile_schema(client, 3)
    with pytest.raises(UnsupportedSchema, match="subject 'gone' version 2\\) is not in the registry"):
        compile_schema(client, 2)
    # the run: each such id refused (its records unsupported_schema dead letters), nothing raised
    fmt = ProtobufFormat(SchemaRegistry(url=registry, max_wait_s=0))
    fmt.learn(None, [1, 2, 3, 4], [(1, "0"), (2, "0"), (3, "0"), (4, "0")])
    assert sorted(fmt.refused) == [1, 2, 3, 4] and fmt.schemas == {} and fmt.batch == []
    assert "HTTP 403" in fmt.refused[1] and "not a schema" in fmt.refused[4]
    # icetide check: a warning each, including for an answer that is no object
    subjects = [{"subject": f"s{i}-value", "id": i, "version": 1} for i in (1, 2, 3, 4)]
    warnings = check_subjects(client, subjects)
    assert [w.split(":")[0] for w in warnings] == [f"subject s{i}-value" for i in (1, 2, 3, 4)]
    assert "HTTP 403" in warnings[0] and "the registry's answer is not a schema" in warnings[3]
    # the credentials themselves refused (a schema by id): still a config error
    url, _, server = serve(lambda path, auth: (401, {}))
    try:
        with pytest.raises(ConfigError, match="refused the credentials"):
            RegistryClient(SchemaRegistry(url=url, max_wait_s=0)).schema(1)
    finally:
        server.shutdown()


def test_an_avro_reference_the_registry_refuses_access_to_is_a_refusal_too(registry: str) -> None:
    client = RegistryClient(SchemaRegistry(url=registry, max_wait_s=0))
    with pytest.raises(UnsupportedSchema, match=r"references subject 'money' version 2: the registry refuses access "
                                                r"to it \(HTTP 403"):
        avro_refs.referenced(client, 7, [{"name": "com.acme.Money", "subject": "money", "version": 2}])


def test_check_warns_when_the_registry_answers_a_schema_id_with_no_object() -> None:
    fake = _Registry({1: _pb(proto3("message R { int64 id = 1; }"))})
    fake.schema = lambda sid: ["no", "object"] if sid == 2 else _Registry.schema(fake, sid)  # type: ignore[method-assign]
    warnings = check_subjects(fake, [{"subject": "a-value", "id": 1}, {"subject": "b-value", "id": 2}])  # type: ignore[arg-type]
    assert len(warnings) == 1 and warnings[0].startswith("subject b-value: its latest schema (id 2) cannot be read")


def _sizes(fmt: ProtobufFormat) -> dict[str, int]:
    return {k: len(v) for k, v in vars(fmt).items() if isinstance(v, dict | list | set)}


def test_records_naming_many_distinct_message_indexes_leave_no_state_per_index() -> None:
    fmt = ProtobufFormat(SchemaRegistry(url="http://127.0.0.1:9"))
    fmt.client = _Registry({1: _pb(proto3("message A { int64 id = 1; message N { string s = 1; } }\n"
                                          "message B { string b = 1; map<string, int64> m = 2; }"))})  # type: ignore[assignment]
    fmt.learn(None, [1], [(1, "0")])
    before = _sizes(fmt)
    for batch in range(5):  # batch after batch of random indexes (as the JVM reads them: up to 32 of < 2^20)
        bad = [(1, f"{batch}.{n}.{n % 7}") for n in range(2_000)] + [(1, str(n)) for n in range(2, 500)]
        fmt.learn(None, [1], [(1, "0"), *bad, (1, "0.1"), (1, "1.0")])
        assert _sizes(fmt) == before  # nothing kept per bad index: the verdict judges them per schema id
        assert fmt.batch == [(1, "0")] and sorted(fmt.messages) == [(1, "0")]
    assert fmt.schemas[1].message_keys() == {"0", "0.0", "1"}  # the map's entry type is no message
    assert list(fmt.schemas[1]._messages) == [(0,)] and fmt.unreadable == {}
    fmt.learn(None, [1], [(1, "1"), (1, "0.0")])  # each real message once
    assert sorted(fmt.messages) == [(1, "0"), (1, "0.0"), (1, "1")] and fmt.batch == [(1, "1"), (1, "0.0")]


V1 = proto3("message Ev { int64 id = 1; double amount = 2; float ratio = 3; string name = 4; int32 n = 5; "
            "bytes raw = 6; }")
V2 = proto3("message Ev { int64 id = 1; int64 amount = 2; int64 ratio = 3; bytes name = 4; int64 n = 5; "
            "string raw = 6; }")


def test_a_later_versions_int64_in_a_double_column_or_bytes_in_a_string_one_is_refused_not_rounded() -> None:
    fmt = ProtobufFormat(SchemaRegistry(url="http://127.0.0.1:9"))
    fmt.client = _Registry({1: _pb(V1), 2: _pb(V2)})  # type: ignore[assignment]
    fmt.learn(None, [1, 2], [(1, "0"), (2, "0")])
    # both versions in a new table's first batch: the types that take both exactly (string → bytes,
    # int → long); the first version's where neither takes the other
    both = fmt.declared([1, 2])
    assert both is not None and both.simpleString() == (
        "struct<id:bigint,amount:double,ratio:float,name:binary,n:bigint,raw:binary>")
    refused = fmt.conflicts(both)
    assert list(refused) == [(2, "0")]  # v2's records: incompatible_schema dead letters
    assert "amount is double in the table but bigint" in refused[(2, "0")]
    assert "ratio is float in the table but bigint" in refused[(2, "0")] and "name" not in refused[(2, "0")]
    # a table v1 made: v2's bytes in its string column are refused too (possibly not UTF-8)
    refused = fmt.conflicts(fmt.messages[(1, "0")].struct)
    assert list(refused) == [(2, "0")] and "name is string in the table but binary" in refused[(2, "0")]
    assert "n is" not in refused[(2, "0")] and "raw is" not in refused[(2, "0")]  # exact: int → long, string → bytes
    # Avro keeps its own promotions (its decoder casts them, as the Avro spec says)
    from icetide.ingest.formats.protobuf_types import HOLDS

    assert fit(DoubleType(), LongType()).ok and fit(StringType(), BinaryType()).ok
    assert not fit(DoubleType(), LongType(), holds=HOLDS).ok and not fit(FloatType(), LongType(), holds=HOLDS).ok
    assert not fit(StringType(), BinaryType(), holds=HOLDS).ok and fit(BinaryType(), StringType(), holds=HOLDS).ok
    one = StructType([StructField("x", DoubleType())])
    assert merged([one, StructType([StructField("x", LongType())])], HOLDS) == one

