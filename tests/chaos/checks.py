"""The chaos run's end checks, each exact (read through PyIceberg: no JVM, nothing of icetide's
own read path).

- no pipeline run ended on its own (a fault may stop a run only by the harness's hand);
- append: every record produced is, exactly once, a row of the table its ``kind`` routes to (a
  good record) or a dead letter (a hostile one), unless Kafka deleted it unread and the pipeline
  reported a gap covering its offset (for every table, or for the record's own), or it was on a
  topic deleted before it was read; no reported gap covers a record that landed;
- CDC (JSON, and Avro on the full stack): the table is exactly the change stream's final state,
  and each bad change one dead letter of its class;
- every file the tables reference exists (local files and, on the full stack, S3 objects);
- the secret in the config (and the object store's secret key) appears in no output;
- the harness itself: its producer delivered at least 98% of the append records (a run whose
  producer failed proves little); a record Kafka confirmed without an offset is placed by a
  census of the topics at the end.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icetide.catalog import pyiceberg_catalog
from icetide.config import load_config
from tests.fixtures.cdc_stream import final_of

if TYPE_CHECKING:
    from tests.chaos.run import Chaos
    from tests.fixtures.cdc_stream import ChangeStream

#: put in the pipelines' config (a webhook URL's password): no output may show it
SECRET = "chaos-webhook-secret-do-not-print"
_GAP = re.compile(r'\{[^{}]*"event": "kafka_gap"[^{}]*\}')


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    parts = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic].partitions
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-probe", "log_level": 0})
    try:
        return {p: int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]) for p in parts}
    finally:
        c.close()


def _messages(bootstrap: str, topics: list[str]) -> Iterator[Any]:
    """Every record still in Kafka in ``topics``, read from each partition's oldest to its end."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-census", "enable.auto.commit": False,
                  "log_level": 0})
    try:
        ends: dict[tuple[str, int], int] = {}
        assign = []
        for topic in topics:
            for p in (meta[topic].partitions if topic in meta else {}):
                low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                if high > low:
                    ends[(topic, p)] = int(high)
                    assign.append(TopicPartition(topic, p, int(low)))
        c.assign(assign)
        idle = 0
        while ends and idle < 30:
            batch = c.consume(10_000, timeout=1.0)
            idle = 0 if batch else idle + 1
            for m in batch:
                if m.error() is None:
                    yield m
                    if m.offset() + 1 >= ends.get((m.topic(), m.partition()), 0):
                        ends.pop((m.topic(), m.partition()), None)
        if ends:
            raise RuntimeError(f"the census could not read {sorted(ends)} to their ends")
    finally:
        c.close()


def census(bootstrap: str, topics: list[str]) -> dict[str, tuple[str, int, int]]:
    """Every record still in Kafka at the end: key → (topic, partition, offset). Ground truth for a
    record whose delivery report carried no offset (librdkafka confirms a retried produce the broker
    had already written, ``DUPLICATE_SEQUENCE_NUMBER``, without telling where it went)."""
    return {m.key().decode(errors="replace"): (m.topic(), m.partition(), m.offset())
            for m in _messages(bootstrap, topics) if m.key() is not None}


def values(bootstrap: str, topic: str) -> Counter[bytes]:
    """How many times each record value (not the null ones) is in ``topic`` at the end."""
    return Counter(m.value() for m in _messages(bootstrap, [topic]) if m.value() is not None)


def checkpoint_partitions(checkpoint: Path, topic: str) -> set[int]:
    """The partitions of ``topic`` the newest batch of a Spark checkpoint has a position in."""
    logs = sorted((int(f.name), f) for f in (checkpoint / "offsets").glob("*") if f.name.isdigit())
    if not logs:
        return set()
    objects = [ln for ln in logs[-1][1].read_text().splitlines() if ln.strip().startswith("{")]
    positions = json.loads(objects[-1]) if len(objects) > 1 else {}
    return {int(p) for p, o in positions.get(topic, {}).items() if int(o) >= 0}


#: log lines that tell where a run started and what it found (printed when a check fails)
_STORY = re.compile(r"starting from|starting at|resuming|recreated|set aside|went back|deleted|fault injection|"
                    r"received SIG|query failed|data may have been missed|are gone|Lost")


def story(logs: list[Path], most: int = 120) -> list[str]:
    """The lines of ``logs`` that tell where each run started and what it found, log by log."""
    out: list[str] = []
    for log in logs:
        if log.exists():
            out += [f"{log.name}: {ln[:400]}" for ln in log.read_text(errors="replace").splitlines()
                    if _STORY.search(ln) and not ln.lstrip().startswith("at ")]
    return out[-most:]


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail}


Gaps = dict[tuple[str, int], list[tuple[int, int, "str | None"]]]


def reported_gaps(logs: list[Path]) -> Gaps:
    """Every ``kafka_gap`` alert the runs logged: (topic, partition) → [from, to) ranges, each with
    the table whose records only it lost (a batch a crash left partial), None for every record."""
    out: Gaps = {}
    for log in logs:
        if not log.exists():
            continue
        for m in _GAP.finditer(log.read_text(errors="replace")):
            a = json.loads(m.group(0))
            topic, _, part = str(a["partition"]).rpartition("[")
            table = str(a["table"]).rpartition(".")[2] if a.get("table") else None
            out.setdefault((topic, int(part.rstrip("]"))), []).append(
                (int(a["lost_from"]), int(a["lost_to"]), table))
    return out


def _at(d: Any) -> str:
    """Where a record was delivered: ``topic#incarnation[partition]@offset``."""
    return f"{d.topic}#{d.incarnation}[{d.partition}]@{d.offset}" if d is not None else "undelivered"


def _in_gap(gaps: Gaps, topic: str, partition: int, offset: int, table: str) -> bool:
    """Whether a reported gap covers the record at ``offset`` bound for ``table``."""
    return any(a <= offset < b and t in (None, table) for a, b, t in gaps.get((topic, partition), []))


def _append(chaos: Chaos) -> list[dict[str, Any]]:
    pipe = chaos.pipes["append"]
    catalog = pyiceberg_catalog(load_config(pipe.cfg))
    ids: Counter[str] = Counter()
    where: dict[str, str] = {}
    for ns, name in catalog.list_tables("chaos"):
        if name in ("dead_letters", "batches", "maintenance"):
            continue
        arrow = catalog.load_table(f"{ns}.{name}").scan(selected_fields=("id",)).to_arrow()
        for i in arrow.column("id").to_pylist():
            ids[i] += 1
            where[i] = name
    dead: Counter[str] = Counter()
    dlq = catalog.load_table("chaos.dead_letters").scan(selected_fields=("_kafka_key", "error_class")).to_arrow()
    classes: Counter[str] = Counter()
    for key, cls in zip(dlq.column("_kafka_key").to_pylist(), dlq.column("error_class").to_pylist(), strict=True):
        uid = key.decode() if isinstance(key, bytes) else str(key)
        dead[uid] += 1
        classes[cls] += 1
    gaps = reported_gaps(pipe.logs)
    work = chaos.append
    in_kafka = census(chaos.kafka.bootstrap, list(work.topics))
    missing, dup, wrong, over, lost, deleted, undelivered, nowhere = [], [], [], [], 0, 0, 0, 0
    for uid, r in work.records.items():
        n = ids[uid] + dead[uid]
        if ids[uid] > 1 or dead[uid] > 1 or n > 1:
            dup.append(uid)
        d = r.delivered
        if d is None:
            undelivered += 1
            continue
        if d.offset is None and d.incarnation == work.incarnation[d.topic]:
            if uid in in_kafka:  # where the census found it: from here on, checked like any other
                d = replace(d, partition=in_kafka[uid][1], offset=in_kafka[uid][2])
            elif n == 0:  # confirmed without an offset, and not in Kafka at the end: nothing to hold icetide to
                nowhere += 1
                continue
        if n == 1:
            if (r.kind is None) != (dead[uid] == 1) or (r.kind is not None and where.get(uid) != r.kind):
                wrong.append(uid)
            if (d.incarnation == work.incarnation[d.topic] and d.offset is not None
                    and _in_gap(gaps, d.topic, d.partition, d.offset, r.kind or "dead_letters")):
                over.append(uid)
            continue
        if n == 0:
            if d.incarnation < work.incarnation[d.topic]:
                deleted += 1
            elif (d.offset is not None and uid not in in_kafka  # a gap over a record Kafka holds is no loss
                  and _in_gap(gaps, d.topic, d.partition, d.offset, r.kind or "dead_letters")):
                lost += 1
            else:
                missing.append(uid)
    produced = len(work.records)
    where_missing = [(u, _at(work.records[u].delivered)) for u in missing[:8]]
    return [
        _check("append: no record missing", not missing,
               f"{len(missing)} of {produced} missing (e.g. {where_missing}); {lost} lost to retention and reported, "
               f"{deleted} on a topic deleted before they were read, {undelivered} not delivered by Kafka, "
               f"{nowhere} confirmed by Kafka without an offset and not in it at the end"),
        _check("append: no record twice", not dup, f"{len(dup)} ids more than once (e.g. {dup[:5]})"),
        _check("append: each record where it belongs", not wrong,
               f"{len(wrong)} good records dead-lettered, hostile ones landed, or in another table (e.g. {wrong[:5]}); "
               f"dead letters by class: {dict(sorted(classes.items()))}"),
        _check("append: no gap reported over a record that landed", not over,
               f"{len(over)} (e.g. {over[:5]}); gaps: {sum(len(v) for v in gaps.values())} reported"),
    ]


def held_expectation(stream: ChangeStream, held: Counter[bytes]
                     ) -> tuple[dict[int, tuple[str, float]], dict[str, int], int]:
    """What a CDC topic holding ``held`` (value → copies, read back at the end) must give: the final
    state its changes give, the dead letters its bad changes must get (a bad change Kafka holds
    twice, sent again after a delivery that failed but had landed, is two), and how many of the
    stream's messages it does not hold at all."""
    changes: dict[int, dict[str, Any]] = {}
    bad: Counter[str] = Counter()
    absent, seen = 0, set()
    for (_key, value), label in zip(stream.messages, stream.labels, strict=True):
        if value is None:  # a tombstone: nothing to tell them apart by, and nothing they change
            continue
        if not held[value]:
            absent += 1
        elif isinstance(label, int):
            changes[label] = stream.history[label]
        elif value not in seen:
            bad[label] += held[value]
        seen.add(value)
    return final_of(changes), dict(bad), absent


def bad_held(stream: ChangeStream, held: Counter[bytes]) -> Counter[tuple[str, bytes]]:
    """The dead letters a CDC topic holding ``held`` must give, record for record: (class, value) →
    how many (a bad change Kafka holds twice is two)."""
    out: Counter[tuple[str, bytes]] = Counter()
    for (_key, value), label in zip(stream.messages, stream.labels, strict=True):
        if value is not None and held[value] and not isinstance(label, int):
            out[(label, value)] = held[value]
    return out


def _cdc_of(chaos: Chaos, key: str, ns: str, work: Any) -> list[dict[str, Any]]:
    pipe = chaos.pipes[key]
    catalog = pyiceberg_catalog(load_config(pipe.cfg))
    arrow = catalog.load_table(f"{ns}.customers").scan(selected_fields=("id", "name", "balance")).to_arrow()
    rows = list(zip(*(arrow.column(c).to_pylist() for c in ("id", "name", "balance")), strict=True))
    got = {k: (n, b) for k, n, b in rows}
    held = values(chaos.kafka.bootstrap, work.topic)
    want, bad, absent = held_expectation(work.stream, held)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    stale = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    dlq = catalog.load_table(f"{ns}.dead_letters").scan(selected_fields=("error_class", "value")).to_arrow()
    classes = Counter(dlq.column("error_class").to_pylist())
    letters = Counter(zip(dlq.column("error_class").to_pylist(), dlq.column("value").to_pylist(), strict=True))
    due = bad_held(work.stream, held)  # record for record: class totals could hide one lost and one twice
    unmatched = sum((due - letters).values()) + sum((letters - due).values())
    sent = sum(1 for _k, v in work.stream.messages if v is not None)
    return [
        _check(f"{key}: exact final state", len(rows) == len(got) and not (missing or extra or stale),
               f"{len(rows)} rows for {len(got)} keys (want {len(want)}); {len(missing)} missing (e.g. {missing[:5]}), "
               f"{len(extra)} resurrected (e.g. {extra[:5]}), {len(stale)} stale (e.g. {stale[:5]})"),
        _check(f"{key}: each bad change one dead letter", dict(classes) == bad and not unmatched,
               f"dead letters {dict(sorted(classes.items()))}, in Kafka {dict(sorted(bad.items()))} "
               f"(produced {dict(sorted(work.stream.bad.items()))}); {unmatched} not matched record for record"),
        # the harness's own health: a change stream Kafka holds only part of proves little
        _check(f"{key}: the harness's producer delivered the change stream", absent == 0 and not work.unconfirmed,
               f"{sent - absent} of {sent} messages in Kafka; {work.resent} sent again, {work.producers} producer(s), "
               f"errors {dict(work.errors.most_common(5))}"),
    ]


def _cdc(chaos: Chaos) -> list[dict[str, Any]]:
    return _cdc_of(chaos, "cdc", "chaos_cdc", chaos.cdc)


def _avro(chaos: Chaos) -> list[dict[str, Any]]:
    return [] if chaos.avro is None else _cdc_of(chaos, "avro", "chaos_avro", chaos.avro)


def _files(chaos: Chaos) -> list[dict[str, Any]]:
    absent: list[str] = []
    tables = checked = 0
    for key, ns in (("append", "chaos"), ("cdc", "chaos_cdc"), ("avro", "chaos_avro")):
        if key not in chaos.pipes:
            continue
        catalog = pyiceberg_catalog(load_config(chaos.pipes[key].cfg))
        for ident in catalog.list_tables(ns):
            tables += 1
            table = catalog.load_table(ident)
            # every snapshot the table still has (time travel reads them), not only the current one:
            # its data and delete files, its manifests and manifest lists
            paths = set(table.inspect.all_files().column("file_path").to_pylist())
            paths |= set(table.inspect.all_manifests().column("path").to_pylist())
            paths |= {s.manifest_list for s in table.metadata.snapshots}
            checked += len(paths)
            for path in sorted(paths):
                if not table.io.new_input(str(path)).exists():  # a local file or an S3 object
                    absent.append(str(path))
    return [_check("no file a table references is missing", not absent,
                   f"{len(absent)} of {checked} missing across {tables} tables, every snapshot they keep "
                   f"(e.g. {absent[:3]})")]


def _secret(chaos: Chaos) -> list[dict[str, Any]]:
    secrets = [SECRET] + ([chaos.store.credentials().secret_access_key] if chaos.full else [])
    seen = [str(log) for p in chaos.pipes.values() for log in p.logs
            if log.exists() and any(s in log.read_text(errors="replace") for s in secrets)]
    return [_check("the secret appears in no output", not seen, f"found in {seen}" if seen else "not found")]


def run_all(chaos: Chaos) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    exits = {p.name: p.exits for p in chaos.pipes.values()}
    badly = {p.name: p.stopped_badly for p in chaos.pipes.values() if p.stopped_badly}
    out.append(_check("no run ended on its own", not any(exits.values()) and not badly,
                      f"exit codes: {exits}; second runs (standby) that did not stop with exit 0 on SIGTERM: "
                      f"{badly or 'none'}"))
    for part in (_append, _cdc, _avro, _files, _secret):
        try:
            out += part(chaos)
        except Exception as e:  # a check that cannot run is a failed check, with the reason
            out.append(_check(part.__name__.strip("_"), False, f"could not check: {type(e).__name__}: {e}"))
    work = chaos.append
    delivered = sum(1 for r in work.records.values() if r.delivered is not None)
    # a run whose producer delivered little proves little: the harness's own health is a check
    out.append(_check("the harness's producer delivered its records", delivered >= 0.98 * len(work.records),
                      f"{delivered} of {len(work.records)} delivered; {work.producers} producer(s); "
                      f"errors {dict(work.errors.most_common(5))}"))
    produced = {"append": len(work.records), "cdc": chaos.cdc.stream.changes}
    if chaos.avro is not None:
        produced["avro"] = chaos.avro.stream.changes
    return {"checks": out, "produced": produced}
