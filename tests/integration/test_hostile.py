"""Hostile records never stop the run: ≥ 10,000 generated records of hostile shapes, names, sizes,
numbers and encodings into a routed, evolving pipeline over two topics."""

from __future__ import annotations

import os
import re
import time
from collections import Counter

from icetide.demo.events import create_topic
from icetide.lake.tables import list_tables
from tests.fixtures import hostile
from tests.fixtures.records import send
from tests.fixtures.stack import routed_config, start, unique

N = 12_000
#: Classes decided before any parse (icetide's record checks) or by evolution's naming rules:
#: their counts must match exactly.
EXACT = ("too_deep", "too_wide", "duplicate_key", "invalid_utf8", "non_finite_number", "reserved_field",
         "ambiguous_field",
         "invalid_field", "type_mismatch", "invalid_route")


def _run_to_idle(cfg, log) -> None:  # type: ignore[no-untyped-def]
    proc = start(cfg, log, "--until-idle", "--for", "900")
    assert proc.wait(1000) == 0, log.read_text(errors="replace")[-4000:]


def test_hostile_records_are_written_or_dead_lettered_and_the_run_goes_on(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("ICETIDE_FUZZ_SEED", time.time()))
    print(f"ICETIDE_FUZZ_SEED={seed}")
    ns = unique("hx")
    topics = [f"hx-{ns[3:]}-a", f"hx-{ns[3:]}-b"]
    for t in topics:
        create_topic(kafka.bootstrap, t, 2)
    cfg = routed_config(kafka, lake, tmp_path, ns, f"hx-{ns[3:]}-.*")
    log = tmp_path / "run.log"

    # 1) the tables are created by well-formed records
    base = hostile.baseline(600, seed)
    for k, t in enumerate(topics):
        send(kafka.bootstrap, t, base.values[k::2], 2)
    _run_to_idle(cfg, log)

    # 2) then the hostile mix, split over both topics
    mix = hostile.generate(N, seed, first=len(base.values))
    produced = {t: mix.values[k::2] for k, t in enumerate(topics)}
    for t, values in produced.items():
        send(kafka.bootstrap, t, values, 2)
    _run_to_idle(cfg, log)

    tables = [t for t in list_tables(spark, "icetide", ns) if t.split(".")[1] in hostile.KINDS]
    assert sorted(t.split(".")[1] for t in tables) == sorted(hostile.KINDS), tables
    rows = []
    for t in tables:
        found = spark.sql(f"SELECT id, _kafka_topic FROM icetide.{t}").collect()
        rows += [(r[0], t.split(".")[1], r[1]) for r in found]
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)), f"seed {seed}: {len(ids) - len(set(ids))} duplicate rows"
    want = {**base.good, **mix.good}
    got = {r[0]: r[1] for r in rows}
    missing = set(want) - set(got)
    extra = set(got) - set(want)
    assert not missing and not extra, (f"seed {seed}: {len(missing)} good records missing (e.g. "
                                       f"{sorted(missing)[:5]}), {len(extra)} hostile ones written (e.g. "
                                       f"{sorted(extra)[:5]})")
    assert got == want, f"seed {seed}: records landed in the wrong table"

    dead = spark.sql(f"SELECT _kafka_topic, error_class, error_message FROM icetide.{ns}.dead_letters").collect()
    assert len(dead) == mix.dead, f"seed {seed}: {len(dead)} dead letters, expected {mix.dead}"
    per_topic_written = Counter(r[2] for r in rows)
    per_topic_dead = Counter(r[0] for r in dead)
    for k, t in enumerate(topics):
        assert per_topic_written[t] + per_topic_dead[t] == len(base.values[k::2]) + len(produced[t]), t
    classes = Counter(r[1] for r in dead)
    for cls in EXACT:
        assert classes[cls] == mix.classes.get(cls, 0), (f"seed {seed}: {cls}: {classes[cls]} dead letters, expected "
                                                         f"{mix.classes.get(cls, 0)}; all: {dict(classes)}")
    assert all(r[2] for r in dead), "a dead letter without a reason"

    # no table gained a column that is ambiguous or reserved
    for t in tables:
        cols = spark.table(f"icetide.{t}").columns
        lowered = [c.lower() for c in cols]
        assert len(lowered) == len(set(lowered)), f"{t} has columns equal ignoring case: {cols}"
        own = [c for c in cols if re.match(r"(?i)_(kafka|icetide|cdc)_", c)]
        assert own == ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key"], own


def test_a_new_tables_column_types_are_not_decided_by_one_outlier_record(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    ns = unique("ho")
    topic = f"ho-{ns[3:]}"
    create_topic(kafka.bootstrap, topic, 1)
    good = [{"id": f"o{i}", "kind": "t", "amount": i + 0.5, "flag": i % 2 == 0, "code": f"c{i}"} for i in range(300)]
    outliers = [{"id": "bad-amount", "kind": "t", "amount": "abc", "flag": True, "code": "x"},
                {"id": "bad-flag", "kind": "t", "amount": 1.5, "flag": "yes", "code": "y"},
                {"id": "number-code", "kind": "t", "amount": 2.5, "flag": False, "code": 7}]
    values = [json.dumps(r).encode() for r in good[:150] + outliers + good[150:]]
    send(kafka.bootstrap, topic, values, 1)
    cfg = routed_config(kafka, lake, tmp_path, ns, topic)
    _run_to_idle(cfg, tmp_path / "run.log")

    types = {f.name: f.dataType.simpleString() for f in spark.table(f"icetide.{ns}.t").schema.fields}
    assert (types["amount"], types["flag"], types["code"]) == ("double", "boolean", "string"), types
    ids = {r[0] for r in spark.sql(f"SELECT id FROM icetide.{ns}.t").collect()}
    assert ids == {r["id"] for r in good} | {"number-code"}
    dead = spark.sql(f"SELECT error_class, error_message FROM icetide.{ns}.dead_letters").collect()
    assert sorted(r[0] for r in dead) == ["type_mismatch", "type_mismatch"], dead
