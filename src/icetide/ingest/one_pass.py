"""Batches whose tables exist, written in one pass over the batch (routed, or into the one table).

The usual path takes two passes: the batch is routed, fingerprinted and cached, its tables are
counted, created and evolved; then every table's rows are parsed from the cache and written. Most
batches of a running stream need none of the first pass: their tables exist, and their records come
in shapes each table is known to fit (:mod:`icetide.ingest.shapes`).

So such a batch is written first in one pass, with no cache: one Spark job reads the batch from
Kafka, checks, routes, fingerprints and parses each record against its table's schema, and hands
each row to its table's Iceberg writer (``MultiTableWrite.runRouted``). Each task reports the shapes
it saw per table and, while shapes are new, keeps one record value per shape. A table whose rows all
have known shapes is committed (tagged as any commit); one that met new shapes is committed when
inference over the kept values (on the driver: no second read) finds its schema fits them unchanged,
and aborted otherwise, its files unreferenced. Everything the pass did not settle (records for new
tables, a shape that needs a schema change, records that failed routing or parsing, tables left out
because a replay or a policy needs the usual path) goes through the usual two passes, reading only
what is left. A single-table pipeline with ``target.schema`` creates its table from it first, so even
its first batch takes one pass; a routed one finds its first batch's tables from the head of each
Kafka partition, creating those with a declared schema (:mod:`icetide.ingest.discover`), and writes
that batch in one pass too.

Invariant: a table is committed by exactly one of the two passes in a batch, with the same tags.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql.types import StructType

from icetide.ingest import discover, evolution, inference, multi_write, names, routing, shapes
from icetide.ingest.ledger import Pending
from icetide.ingest.one_pass_frames import Target, declared_frame, decoded_frame, frame, id_of_shape
from icetide.ingest.strategies import BatchContext, Strategy
from icetide.lake.tables import ensure_namespace
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: A table must have been written within this many batches to be a target of the one pass: a
#: target costs a table load and a write builder per batch even when no record goes to it.
RECENT_BATCHES = 20
#: After a batch that met new shapes, this many batches keep a record value per shape (see OnePass).
SAMPLE_BATCHES = 5
#: At most this many targets (the most recently written): each task keeps a writer open per table
#: it meets, so a wider fan-out leaves its least recent tables to the usual path.
MAX_TARGETS = 64


@dataclass
class Result:
    """What the one pass settled: committed tables, their counts and whether anything is left."""

    committed: dict[str, int] = field(default_factory=dict)  # namespace.table → rows written
    with_bad: list[str] = field(default_factory=list)  # committed tables some of whose records failed
    ts_max: list[int] = field(default_factory=list)
    rest: bool = False  # records the one pass did not settle: the usual path runs on them
    created: list[str] = field(default_factory=list)  # the target table, made from target.schema first
    inferred: list[str] = field(default_factory=list)  # tables whose new shapes were inferred from kept values


class OnePass(Strategy):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: table → the schema (JSON) whose new shapes the one pass could not settle: left to the
        #: usual path until the schema changes (a table with refused fields would waste a pass a batch)
        self._unsettled: dict[str, str] = {}
        self._drifted = -SAMPLE_BATCHES - 1  # the last batch in which a table met shapes it was not known to fit
        #: declared formats: table → (schema JSON, batch) when it met a learned id that does not settle
        self._refusing: dict[str, tuple[str, int]] = {}
        self._unclustered: set[str] = set()  # tables whose shuffle by partition Spark could not plan
        self._asked_registry = False  # learn_first: once a run

    def create_declared(self) -> None:
        """Before the stream starts: the one target table made from ``target.schema`` when it does
        not exist yet (a CDC table with its tombstone table), as a hand-written job makes its table
        before its stream; the first batch reports it as created. Best effort: a table the catalog
        refuses, or a catalog that does not answer, is left to the first batch, as before (which
        dead-letters its records with the reason, or fails and is restarted)."""
        table = self.cfg.target.table
        try:
            made, why = self._create_configured()
        except Exception as e:
            log.warning("could not create %s before the stream starts (%s); its first batch tries again",
                        table, error_line(e, 300))
            return
        if why is not None:
            log.warning("%s was not created from target.schema: %s", table, why)
        self.preparer.created_before += made

    def learn_first(self, lap: Callable[[str], None]) -> bool:
        """A single-table Avro pipeline's first batch of a run (no schema id learned yet): learn each
        topic's latest value schema from the registry and create the table from it if it does not
        exist, so that batch too takes the one pass; False when that cannot be (asked once a run:
        routed or CDC targets, a topic pattern, another subject naming, no such subject, an outage).
        Records of another id are left to the usual path, which learns them, as in any later batch."""
        cfg, t, pre = self.cfg, self.cfg.target, self.preparer
        if self._asked_registry or t.route is not None or t.table is None or not cfg.source.topics:
            return False
        self._asked_registry = True
        if t.policy_for(t.table).cdc is not None:
            return False
        try:
            ids, safe = pre.formats.learn_latest(self.spark, list(cfg.source.topics))
        except Exception as e:  # the usual path learns the batch's own ids (and waits out an outage)
            log.info("no schema learned from the registry before the first batch: %s", error_line(e, 300))
            return False
        if not ids:
            return False
        if t.table not in pre.known_tables():
            # made from the latest version only when older records fit it and may evolve it (a
            # version registered ahead of its producers, under weaker compatibility, or a table that
            # never evolves, is left to the batch's own ids: the usual path)
            if not safe or not t.evolve_schema:
                return False
            declared = pre.formats.declared(ids, None)
            if declared is None:
                return False
            if t.field_names == "sanitize":
                declared = cast(StructType, names.sanitized_type(declared))
            ensure_namespace(self.spark, pre.catalog, t.table.split(".")[0])
            if pre.create(t.table, declared) is not None:
                return False  # the usual path reports why
            pre.known_tables().add(t.table)
            pre.created_before.append(t.table)
        lap("learn_first")
        return True

    def write(self, rows: DataFrame, ctx: BatchContext, plain: DataFrame | None = None) -> Result | None:
        """Write the records of recently written tables in one pass; None when no table qualifies.
        ``plain``: the batch routed without the record checks, for a pass that decodes each value
        in the write task (the checks are the decoder's); else ``rows`` is parsed with expressions."""
        cfg, t, pre = self.cfg, self.cfg.target, self.preparer
        declared = pre.formats.declared_one_pass  # Avro: typed by the registry, each id a shape
        by_record = declared and t.route is not None and t.route.by in ("record_name", "field")
        if declared and shapes.SHAPE not in rows.columns:
            return None
        if not declared and ((t.evolve_schema and shapes.SHAPE not in rows.columns) or not pre.formats.json_only):
            return None  # the one pass parses JSON and Avro
        created = self._create_configured()[0] + pre.take_created_before()
        never = ctx.batch_id - RECENT_BATCHES - 1

        def last(table: str) -> int:
            r = self.ledger.recent(self.q(table))
            return never if r is None else r

        def may_fit(x: str) -> bool:
            if declared:  # met an id that does not settle lately, the schema unchanged since: the usual path
                schema, when = self._refusing.get(x, ("", never))
                return schema != pre.schema(x).json() or ctx.batch_id - when > RECENT_BATCHES
            return (not t.evolve_schema or pre.shapes.knows(x, pre.schema(x))
                    or (shapes.settles_unseen(pre.schema(x)) and self._unsettled.get(x) != pre.schema(x).json()))

        found = discover.Found()
        if (t.route is not None and not declared and cfg.stream.discovery_records
                and discover.may_find(t, pre.known_tables())
                and not any(ctx.batch_id - last(x) <= RECENT_BATCHES for x in pre.known_tables())):
            # a run's first batch: its tables from its partitions' heads
            found = discover.discover(self.spark, cfg, pre, ctx.ranges, self.parallel, ctx.lap)
            if found.tables:
                self._drifted = ctx.batch_id  # keep a value per shape: the sample may not show every shape
        created += found.created
        candidates = [x for x in sorted(pre.known_tables())
                      if (t.route is None or ctx.batch_id - last(x) <= RECENT_BATCHES or x in found.tables)
                      and t.policy_for(x).cdc is None and may_fit(x)]
        if not candidates:
            return Result(rest=True, created=created) if created else None
        if len(candidates) > MAX_TARGETS:
            candidates = sorted(sorted(candidates, key=lambda x: -last(x))[:MAX_TARGETS])
        job = multi_write.MultiTableWrite(self.spark)

        def add(table: str) -> Pending | None:
            pending = self.ledger.begin(self.q(table), ctx.batch_id, ctx.ranges)
            if pending is None or pending.keep is not None:  # a replay: the usual path sorts it out
                return None
            reason = job.add_target(pre.catalog, table, pre.full_schema(table), pending.tags, clustered=True)
            if reason is not None:
                self._refused(table, reason)
                return None
            return pending

        staged = {x: p for x, p in zip(candidates, self.parallel(add, candidates), strict=True) if p is not None}
        if not staged:
            return Result(rest=True, created=created) if created else None
        order = sorted(staged)
        targets = [Target(x, pre.schema(x), pre.full_schema(x)) for x in order]
        # With evolution, while shapes are new (a table's first batches, drift in the last few batches)
        # record values ride along, one kept per shape: a shape a table is not known to fit is settled
        # from them, with no second read of the batch. A stream whose shapes have settled does not pay
        # for the copy; a new shape then takes the usual path once, and the next batches sample again.
        sample = not declared and t.evolve_schema and (ctx.batch_id <= self._drifted + SAMPLE_BATCHES or any(
            not pre.shapes.knows(x, pre.schema(x)) for x in order))
        src = cfg.source
        by_field = t.route is not None and t.route.by == "field" and len({x.schema.json() for x in targets}) == 1
        # Tables that all ask for write.distribution-mode=hash have their rows shuffled by partition
        # first, as Spark's own write would: the frame of expressions then, since the in-task decoder
        # has no rows before its task. A batch mixing them with other tables, or whose keys Spark
        # cannot compute, is written unshuffled: the layout is a request, not a condition of the write.
        keys = [job.clustering(x) for x in order]
        shuffle = all(keys) and not self._unclustered.intersection(order)
        decoded = (decoded_frame(plain, targets, t.kafka_metadata_columns, by_field)
                   if plain is not None and cfg.stream.decode_in_task and not shuffle else None)
        if declared:
            framed, starts = declared_frame(rows, targets, pre.formats, t.kafka_metadata_columns,
                                               src.max_value_bytes, pre.formats.expected() if by_record else None)
            sample_column = -1
        elif decoded is None:
            framed, starts, sample_column = frame(rows, targets, t.kafka_metadata_columns,
                                                     src.max_value_bytes, sample)
        else:
            framed, group_of, types, layout = decoded
            decoding = multi_write.Decoding(
                group_of, types, layout, self.spark.conf.get("spark.sql.session.timeZone") or "UTC",
                src.max_depth, src.max_fields, names.RESERVED_PREFIXES, src.max_value_bytes, shapes.MAX_SHAPES,
                sample)
            if by_field:
                assert t.route is not None and t.route.name is not None
                ns_pieces, table_pieces = routing.template_pieces(t.route)
                decoding = dataclasses.replace(
                    decoding, route_path=t.route.name.split("."), namespace_pieces=ns_pieces,
                    table_pieces=table_pieces,
                    route_tables=[x if routing.allowed_table(t.route, x, pre.reserved) else None for x in order],
                    fallback=routing.table_column(t.route, pre.reserved, src.max_value_bytes))
        if shuffle:
            try:
                framed = multi_write.clustered_frame(framed, pre.catalog, starts, keys)
            except Exception as e:  # e.g. a catalog that exposes no system.* functions
                log.warning("writing %s without the shuffle by partition its tables ask for: %s", order,
                            error_line(e, 300))
                self._unclustered.update(order)
        ctx.lap("one_pass_plan")
        qualified = [self.q(x) for x in order]
        self.ledger.mark(qualified, ctx.since_ms or int(time.time() * 1000))
        try:
            log.info("writing batch %s to %d tables in one pass", ctx.batch_id, len(order))
            if decoded is None:
                job.run_routed(framed, order, starts, shapes.MAX_SHAPES, sample_column)
            else:
                job.run_decoded(framed, order, decoding)
        except BaseException:
            self.ledger.clear(qualified)
            raise
        ctx.lap("one_pass_job")
        result = Result(rest=job.unrouted() > 0, created=created)
        # Avro routed by record name or field: a record of an id not learned yet has no table here (the
        # route is read from the decoded record), so any table may be its table once the usual path
        # learns the id: the frame hands it to the first target (declared_frame's ``readable``), and
        # nothing is committed then.
        blind = by_record and any(self._unlearned(x, job) for x in order)
        ready: list[str] = []
        written = {x: job.written(x) for x in order}
        if blind:
            unsure = list(order)
        elif declared:
            unsure = [x for x in order if written[x].good + written[x].bad > 0 and not self._ids_settle(x, job, ctx)]
        else:
            unsure = [x for x in order if t.evolve_schema and written[x].good + written[x].bad > 0
                      and not pre.shapes.covers(x, pre.schema(x), job.shapes(x))]
        settled = self._fits(unsure, job) if sample and unsure else set()
        if settled:
            result.inferred = sorted(settled)
            self._drifted = ctx.batch_id
        for x in order:
            w = written[x]
            fits = x not in unsure or x in settled
            if w.good + w.bad > 0 and fits:
                ready.append(x)
                continue
            if w.good + w.bad > 0:
                self._drifted = ctx.batch_id  # new shapes: keep values for the next batches' too
            job.abort(x)  # no record, or a shape the table may not fit: the usual path infers it
            self.ledger.clear([self.q(x)])
            result.rest = result.rest or w.good + w.bad > 0
        if sample:
            ctx.lap("one_pass_shapes")

        # nothing left for the usual path (which would read the batch from Kafka again): the read is over
        ctx.read_over = not result.rest and not any(written[x].bad for x in ready)

        def commit(table: str) -> multi_write.Written:
            log.info("committing batch %s to %s", ctx.batch_id, self.q(table))
            try:
                self.ledger.commit_written(staged[table], job, table)
            finally:
                self.ledger.clear([self.q(table)])
            w = job.written(table)
            self.ledger.finish(staged[table], w.ts_max)
            return w

        for x, w in zip(ready, self.parallel(commit, ready), strict=True):
            result.committed[x] = w.good
            if w.ts_max is not None:
                result.ts_max.append(w.ts_max)
            if w.bad:
                result.with_bad.append(x)
                result.rest = True
        ctx.lap("one_pass_commit")
        return result

    def _unlearned(self, table: str, job: multi_write.MultiTableWrite) -> bool:
        """Whether ``table``'s records carried a schema id not learned yet (or more ids than listed)."""
        seen = job.shapes(table)
        return seen is None or any(not self.preparer.formats.learned(id_of_shape(s)) for s in seen)

    def _ids_settle(self, table: str, job: multi_write.MultiTableWrite, ctx: BatchContext) -> bool:
        """Whether every schema id ``table``'s records carried settles in it as it is
        (:meth:`Preparer.settles`). A table that met an id not learned yet is left to the usual path,
        which learns it (and evolves the table); one that met a learned id that does not settle
        (a field a policy refuses, a type that conflicts) is left to it for the next batches too."""
        seen = job.shapes(table)
        if seen is None:  # more ids than a task lists
            return False
        ids = {id_of_shape(s) for s in seen}
        pre = self.preparer
        if all(pre.settles(table, i) for i in ids if pre.formats.learned(i)):
            return all(pre.formats.learned(i) for i in ids)  # an id not learned yet: no memo, it may settle
        self._refusing[table] = (pre.schema(table).json(), ctx.batch_id)
        return False

    def _create_configured(self) -> tuple[list[str], str | None]:
        """The one target table, created from ``target.schema`` when it does not exist yet (when the
        run starts, :meth:`create_declared`, else a pipeline's first batch): so that batch, too, is
        written in one pass (a CDC table's batch is parsed once, into its cache:
        :meth:`~icetide.ingest.strategies.Strategy.pre_parse`). Returns the tables made, and why
        the table was not made when the catalog refused it."""
        t, pre = self.cfg.target, self.preparer
        if t.route is not None or t.table is None or t.table in pre.known_tables():
            return [], None
        if not t.policy_for(t.table).schema_ddl:
            return [], None  # its schema comes from its records: the usual path infers it
        ensure_namespace(self.spark, pre.catalog, t.table.split(".")[0])
        why = pre.create(t.table, None)
        if why is not None:
            return [], why  # the usual path reports it, as a dead letter per record
        pre.known_tables().add(t.table)
        return [t.table], None

    def _fits(self, tables: list[str], job: multi_write.MultiTableWrite) -> set[str]:
        """Of ``tables``, those whose record shapes they are not known to fit need no change to their
        schema, by one inference over the job's kept value of each new shape of every table (on the
        driver: no pass over the batch). Only a clean answer counts: any change, refusal or
        value-dependent candidate (int width, decimal digits, required fields) leaves a table to the
        usual path, which decides over every record."""
        t, pre = self.cfg.target, self.preparer
        values: dict[str, list[str]] = {}
        for table in tables:
            seen = job.shapes(table)
            new = sorted(seen - pre.shapes.known(table, pre.schema(table))) if seen is not None else None
            got = job.samples(table, new) if new and shapes.UNKNOWN not in new else None
            if got:
                values[table] = got
        inferred = inference.infer_values(self.spark, values) if values else {}
        out: set[str] = set()
        for table in tables:
            schema, found = pre.schema(table), inferred.get(table)
            if found is not None and t.field_names == "sanitize":
                found = cast(StructType, names.sanitized_type(found))
            evo = evolution.diff(schema, found, t.max_columns) if found is not None else None
            if evo is None or evo or evo.rejected or evo.int_candidates or evo.decimal_candidates or evo.required:
                self._unsettled[table] = schema.json()
                continue
            pre.shapes.settle(table, schema, job.shapes(table))
            out.add(table)
        return out
