"""Topics deleted and created again under the same name (#41).

A new topic numbers its offsets from 0 again, so the offsets recorded for the deleted one (in the
Spark checkpoint and in each table's ledger) would make the new topic's records below them look
already written: skipped in silence. Which topic a recorded offset belongs to is told by Kafka's
topic id, recorded with the checkpoint (``icetide-topics.json``) and in the tables
(``icetide.topic-ids``); where no id was recorded (an older icetide), by a recorded offset beyond
the partition's end, or a recorded partition the topic no longer has.

``source.on_topic_recreated``: ``restart`` (default) ingests the new topic from its earliest offset:
its old offsets are set aside in every table (:meth:`~icetide.lake.offsets.Watermark.restarted`) and
the query starts without the old checkpoint; every other topic goes on exactly where it was.
``stop`` ends the run before anything is written, naming the topic and the fix. Checked when a run
(or its query) starts, and when a batch shows a topic's offsets going back or a topic appearing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from icetide.config.source import KafkaSource
from icetide.errors import TopicRecreatedError, TransientError
from icetide.ingest import source
from icetide.lake import checkpoint
from icetide.lake.offsets import BatchRanges, TopicPartition, Watermark
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]


@dataclass(frozen=True)
class Recreated:
    """A topic whose recorded offsets belong to a deleted topic of the same name, and the evidence."""

    topic: str
    old_id: str | None = None
    new_id: str | None = None
    #: where no id tells: partition → (recorded offset, the partition's end now; None: no such partition now)
    beyond: dict[TopicPartition, tuple[int, int | None]] = field(default_factory=dict)

    def describe(self) -> str:
        if self.old_id and self.new_id and self.old_id != self.new_id:
            return f"topic id {self.old_id} -> {self.new_id}"
        out = []
        for (_, p), (off, end) in sorted(self.beyond.items())[:3]:
            out.append(f"partition {p}: offset {off} recorded, the topic has no partition {p} now" if end is None
                       else f"partition {p}: offset {off} recorded, the topic now ends at {end}")
        more = len(self.beyond) - 3
        return "; ".join(out) + (f"; and {more} more partitions" if more > 0 else "") or "found recreated"


@dataclass(frozen=True)
class KafkaTopics:
    """What Kafka says of the source's topics now."""

    ids: dict[str, str]  # topic → its id, where the broker tells it
    partitions: dict[str, list[int]]
    ends: Offsets  # next offset per partition (where known)


def probe(src: KafkaSource) -> KafkaTopics:
    """The topics the source reads, their ids and ends: three requests, once per query start."""
    parts = source.list_partitions(src)
    try:
        ids = source.topic_ids(src, list(parts))
    except Exception as e:  # a broker without topic ids: offsets beyond the end still tell
        log.info("Kafka did not tell the topic ids (%s); recreated topics are told by their offsets only",
                 error_line(e, 200))
        ids = {}
    try:
        ends = source.end_offsets(src, [(t, p) for t, ps in parts.items() for p in ps])
    except Exception:
        ends = {}
    return KafkaTopics(ids, parts, ends)


def recreated_topics(kafka: KafkaTopics, recorded_ids: dict[str, set[str]], recorded: Offsets
                     ) -> dict[str, Recreated]:
    """Topics Kafka has now that are not the ones the offsets were recorded for: by id where both are
    known; else by a recorded offset beyond its partition's end, or a recorded partition now gone."""
    out = {}
    for topic, parts in sorted(kafka.partitions.items()):
        now, ids = kafka.ids.get(topic), recorded_ids.get(topic, set())
        if now is not None and ids:
            if now not in ids:
                out[topic] = Recreated(topic, ", ".join(sorted(ids)), now)
            continue
        beyond: dict[TopicPartition, tuple[int, int | None]] = {
            tp: (off, kafka.ends.get(tp)) for tp, off in recorded.items()
            if tp[0] == topic and (tp[1] not in parts or (tp in kafka.ends and off > kafka.ends[tp]))}
        if beyond:
            out[topic] = Recreated(topic, ", ".join(sorted(ids)) or None, now, beyond)
    return out


def undecided(kafka: KafkaTopics, recorded_ids: dict[str, set[str]], recorded: Offsets,
              found: dict[str, Recreated]) -> set[str]:
    """Topics something was recorded for of which Kafka told no id now (where one was recorded) or
    no end for a recorded partition: the start cannot tell whether they are the topics recorded, so
    the first batch that reads each asks again (:func:`verdicts`)."""
    out = set()
    for topic, parts in kafka.partitions.items():
        if topic in found or topic in kafka.ids:
            continue
        ends_unknown = any(tp[0] == topic and tp[1] in parts and tp not in kafka.ends for tp in recorded)
        if recorded_ids.get(topic) or ends_unknown:
            out.add(topic)
    return out


def verdicts(topics: set[str], known: dict[str, str], now: dict[str, str], recorded: Offsets,
             ends: Offsets) -> tuple[dict[str, Recreated], dict[str, str], set[str]]:
    """For topics the start could not check: (recreated, confirmed → their id, still unknown). By id
    where Kafka tells one now (a recorded id differing from it: recreated); else by a recorded offset
    beyond the partition's end; unknown where Kafka told neither (or only an id with none recorded
    and no end)."""
    found: dict[str, Recreated] = {}
    same: dict[str, str] = {}
    unknown: set[str] = set()
    for t in sorted(topics):
        k, n = known.get(t), now.get(t)
        if k and n:
            if k != n:
                found[t] = Recreated(t, k, n)
            else:
                same[t] = n
            continue
        mine = {tp: off for tp, off in recorded.items() if tp[0] == t}
        beyond: dict[TopicPartition, tuple[int, int | None]] = {
            tp: (off, ends[tp]) for tp, off in mine.items() if tp in ends and off > ends[tp]}
        if beyond:
            found[t] = Recreated(t, k, n, beyond)
        elif all(tp in ends for tp in mine) and (n or not k):
            same[t] = n or ""
        else:
            unknown.add(t)
    return found, {t: i for t, i in same.items() if i}, unknown


#: Batches in a row for which Kafka answered but told no id of a topic it told before; then its ends decide.
GIVE_IDS_UP_AFTER = 3


def stale_topics(wm: Watermark, current: dict[str, str], restarted: dict[str, Recreated], done: set[str]
                 ) -> dict[str, str | None]:
    """The topics whose offsets in a table's watermark belong to a deleted topic, each with the new
    topic's id (None: unknown): a different id recorded than Kafka's now, or a topic this run found
    recreated (``restarted``) whose offsets the table holds under no id or another one (once per
    table and run: ``done``)."""
    out: dict[str, str | None] = {}
    for t in sorted({t for t, _ in wm.offsets} | set(wm.topic_ids)):
        held, now = wm.topic_ids.get(t), current.get(t)
        if (t in restarted and t not in done and (now is None or held != now)) or (held and now and held != now):
            out[t] = now
    return out


def confirm_stale(src: KafkaSource, wm: Watermark, stale: dict[str, str | None]) -> None:
    """Before a table's offsets of ``stale`` topics are set aside: where the table holds an id other
    than the one this run knows, Kafka is asked again, and the offsets are set aside only when Kafka
    confirms this run's id. Otherwise (Kafka says the table's id, another one, or does not answer)
    this run's view may be the old one (it was paused while another run read the new topic):
    :class:`~icetide.errors.TransientError`, so the query starts again and learns the ids afresh,
    instead of marking the new topic's offsets as the deleted one's (never "not recreated" for
    want of an answer, nor "recreated" either)."""
    # (a run that knows no id decided by offsets, Kafka not telling ids: nothing to confirm)
    doubtful = sorted(t for t, now in stale.items() if now and wm.topic_ids.get(t) and wm.topic_ids[t] != now)
    if not doubtful:
        return
    try:
        kafka = source.topic_ids(src, doubtful)
    except Exception as e:
        kafka, why = {}, f" ({str(e)[:200]})"
    else:
        why = ""
    unsure = [t for t in doubtful if kafka.get(t) != stale[t]]
    if unsure:
        raise TransientError(f"topics {', '.join(unsure)}: the table holds another id than this run knows, and "
                             f"Kafka does not confirm this run's{why}; nothing was set aside, the query starts again")


def ids_to_record(held: Watermark | None, ranges: BatchRanges, current: dict[str, str]) -> dict[str, str]:
    """The topic ids a commit of ``ranges`` records: those of its topics with records whose current
    id the table does not hold yet (after an upgrade, or a recreation)."""
    have = held.topic_ids if held is not None else {}
    return {t: current[t] for t in sorted({t for (t, _), (a, b) in ranges.ranges.items() if b > a})
            if t in current and have.get(t) != current[t]}


def suspects(start: Offsets, end: Offsets) -> tuple[dict[TopicPartition, tuple[int, int]], set[str]]:
    """What a batch's planned offsets make worth asking Kafka about: partitions whose offsets went
    back (Spark skips to the new end), and topics new to the batch (Spark reads those from their
    earliest offset; a topic deleted while the pipeline ran comes back this way)."""
    back = {tp: (start[tp], e) for tp, e in end.items() if tp in start and start[tp] >= 0 and e < start[tp]}
    return back, {t for t, _ in end} - {t for t, _ in start}


def in_run(known: dict[str, str], now: dict[str, str], back: dict[TopicPartition, tuple[int, int]],
           appeared: set[str]) -> tuple[dict[str, Recreated], dict[str, str]]:
    """Of a batch's suspects: the topics recreated (another id than the run knows; or offsets gone
    back where no id tells), and the ids learned (topics new to the run, or the same topic)."""
    found, learned = {}, {}
    for t in sorted({t for t, _ in back} | appeared):
        k, n = known.get(t), now.get(t)
        went: dict[TopicPartition, tuple[int, int | None]] = {tp: r for tp, r in back.items() if tp[0] == t}
        if k and n and k != n:
            found[t] = Recreated(t, k, n)
        elif went and not (k and n):
            found[t] = Recreated(t, k, n, went)
        elif n:
            learned[t] = n
    return found, learned


def stop_message(pipeline: str, found: dict[str, Recreated], done: str = "Nothing was written.") -> str:
    """The one line ``source.on_topic_recreated: stop`` ends a run with: the topic, the evidence, the fix."""
    what = "; ".join(f"topic '{r.topic}' ({r.describe()})" for r in found.values())
    return (f"source.on_topic_recreated: {what} was deleted and created again since pipeline '{pipeline}' last "
            "read it: the offsets recorded for it belong to the deleted topic, and the new topic's records "
            f"below them would be skipped. {done} To ingest the new topic from its start, set "
            "source.on_topic_recreated: restart and run again")


class Topics:
    """What a run knows of its topics' incarnations; shared by the runner, the ledger and the sink.
    Disarmed (nothing is checked) until the runner has compared them with what was recorded."""

    def __init__(self, src: KafkaSource, pipeline: str) -> None:
        self.src, self.pipeline = src, pipeline
        self.armed = False
        self.ids: dict[str, str] = {}  # topic → Kafka's id now
        self.recorded: dict[str, str] = {}  # topic → the id recorded before (for topics Kafka lacked at the start)
        self.restarted: dict[str, Recreated] = {}  # found when the query started: read again from the start
        self.pending: dict[str, Recreated] = {}  # found by a batch: the query restarts to read them again
        self.voided: set[tuple[str, str]] = set()  # (table, topic) whose old offsets were set aside
        #: topics the start could not check (Kafka did not answer): the first batch reading each asks
        self.unverified: set[str] = set()
        self.recorded_offsets: Offsets = {}  # what was recorded at the start, for those checks
        self._unanswered: dict[str, int] = {}  # topic → batches Kafka gave no answer for it

    def arm(self, ids: dict[str, str], restarted: dict[str, Recreated], recorded: dict[str, str] | None = None,
            unverified: set[str] | None = None, recorded_offsets: Offsets | None = None) -> None:
        self.ids, self.restarted, self.pending, self.voided = dict(ids), dict(restarted), {}, set()
        self.recorded = {t: i for t, i in (recorded or {}).items() if t not in restarted}
        self.unverified = set(unverified or ()) - set(restarted)
        self.recorded_offsets = {tp: o for tp, o in (recorded_offsets or {}).items() if tp[0] in self.unverified}
        self.armed = True

    def stale(self, table: str, wm: Watermark) -> dict[str, str | None]:
        if not self.armed:
            return {}
        return stale_topics(wm, self.ids, self.restarted, {t for x, t in self.voided if x == table})

    def unreadable(self, batch: int) -> None:
        """A batch whose planned offsets cannot be read: :class:`~icetide.errors.TransientError` while a
        topic waits for its check (it could be recreated; the batch must not write it unchecked)."""
        if self.armed and self.unverified:
            raise TransientError(f"batch {batch}: its offset log is not readable, and topic(s) "
                                 f"{', '.join(sorted(self.unverified))} are still to be checked for a recreation: "
                                 "nothing of the batch was written, the query starts again")

    def _verify(self, batch: int, topics: set[str], now: dict[str, str], found: dict[str, Recreated],
                learned: dict[str, str]) -> tuple[dict[str, Recreated], dict[str, str]]:
        """The start's unanswered question, asked by the first batch reading ``topics``; a
        :class:`~icetide.errors.TransientError` (the batch writes nothing, the query starts again)
        while Kafka still cannot tell."""
        mine = [tp for tp in self.recorded_offsets if tp[0] in topics]
        try:
            ends = source.end_offsets(self.src, mine) if mine else {}
        except Exception:
            ends = {}
        more, same, unknown = verdicts(topics, {**self.recorded, **self.ids}, now, self.recorded_offsets, ends)
        for t in sorted(unknown):
            self._unanswered[t] = self._unanswered.get(t, 0) + 1
        settled = {t for t in unknown if self._unanswered[t] >= GIVE_IDS_UP_AFTER
                   and all(tp in ends for tp in self.recorded_offsets if tp[0] == t)}
        for t in sorted(settled):  # Kafka answers, but no longer tells this topic's id: its ends decide
            log.warning("batch %s: Kafka has not told topic %s's id in %d tries (it did before); deciding by its "
                        "ends (none below the recorded offsets): a recreated topic refilled past them cannot be "
                        "told this way", batch, t, self._unanswered[t])
        unknown -= settled
        if unknown:
            raise TransientError(
                f"batch {batch}: Kafka did not tell whether topic(s) {', '.join(sorted(unknown))} are the ones this "
                "pipeline recorded (their ids and ends; a topic deleted and created again would have its new records "
                "skipped): nothing of the batch was written, the query starts again and asks again")
        self.unverified -= topics
        return {**found, **more}, {**learned, **same}

    def remember(self, spark: SparkSession, location: str) -> None:
        """Record the topics' ids with the checkpoint (kept for topics not read now)."""
        try:
            have = checkpoint.read_topic_ids(spark, location)
            if {**have, **self.ids} != have:
                checkpoint.write_topic_ids(spark, location, {**have, **self.ids})
        except Exception as e:  # it only makes the next start's check weaker
            log.warning("could not record the topic ids with the checkpoint: %s", error_line(e, 200))

    def check_batch(self, spark: SparkSession, location: str, batch: int, start: Offsets, end: Offsets) -> None:
        """Before a batch writes: raise :class:`TopicRecreatedError` if one of its topics was
        recreated while the pipeline ran (Kafka is asked only when offsets went back or a topic
        appeared)."""
        back, appeared = suspects(start, end)
        verify = self.unverified & ({t for t, _ in start} | {t for t, _ in end}) if self.armed else set()
        if not self.armed or not (back or appeared or verify):
            return
        try:
            now = source.topic_ids(self.src, sorted({t for t, _ in back} | appeared | verify))
        except Exception:
            now = {}
        found, learned = in_run({**self.recorded, **self.ids}, now, back, appeared)
        if verify:
            found, learned = self._verify(batch, verify - set(found), now, found, learned)
        for (t, p), (a, b) in sorted(back.items()):
            if t not in found:
                log.warning("batch %s: offsets of %s[%d] went back from %d to %d under the same topic id: Kafka "
                            "truncated the partition (an unclean leader election?)", batch, t, p, a, b)
        if learned:
            self.ids.update(learned)
            self.remember(spark, location)
        if found:
            self.pending.update(found)
            what = "; ".join(f"topic '{r.topic}' ({r.describe()})" for r in found.values())
            if self.src.on_topic_recreated == "stop":
                raise TopicRecreatedError(stop_message(self.pipeline, found))
            raise TopicRecreatedError(f"batch {batch}: {what} was deleted and created again while the pipeline "
                                      "ran; nothing of the batch was written, the query starts again and reads it "
                                      "from its start (source.on_topic_recreated: restart)")
