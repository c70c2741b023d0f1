"""Run a plan with Iceberg's own procedures; retry conflicts; record every action in Iceberg.

Procedures run through SQL built here from validated identifiers and planner-built literals only;
`where` filters come from :mod:`icetide.maintenance.partitions`, which refuses any value outside a
narrow alphabet. A failure is recorded and the next step runs: maintenance never raises into the
stream.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType, TimestampType

from icetide import faults
from icetide.config.policy import StepName
from icetide.errors import is_commit_conflict
from icetide.lake import inflight
from icetide.lake.meta import MetaReader
from icetide.lake.meta_spark import SparkMeta
from icetide.lake.offsets import mirrors_needed, set_property
from icetide.lake.table_io import TableIO
from icetide.lake.tables import ensure_table, mirror_in_driver
from icetide.maintenance.planner import Step, TablePlan
from icetide.secrets import error_line, scrub

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
#: Steps that rewrite files (a crash after one committed must leave the table consistent).
REWRITES = frozenset({StepName.REWRITE_DATA_FILES, StepName.REWRITE_HOT_FILES,
                      StepName.REWRITE_POSITION_DELETE_FILES, StepName.REWRITE_MANIFESTS})
_SAFE_LITERAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:+ -(),<>=")

# The partition source is not the first column: SeaweedFS's REST catalog (4.48) rejects a create
# whose partition spec points at field id 1.
LOG_SCHEMA = StructType([
    StructField("table_name", StringType()), StructField("started_at", TimestampType()),
    StructField("step", StringType()), StructField("outcome", StringType()),
    StructField("reason", StringType()), StructField("figures", StringType()),
    StructField("expected", StringType()), StructField("arguments", StringType()),
    StructField("result", StringType()), StructField("files_in", LongType()),
    StructField("files_out", LongType()), StructField("bytes_in", LongType()),
    StructField("attempts", LongType()), StructField("seconds", DoubleType()),
    StructField("error", StringType()),
])


@dataclass
class Budget:
    """Per cycle: how many data rewrites and how many bytes they may touch."""

    rewrites: int = 1
    rewrite_bytes: int = 50 * 1024**3
    used_rewrites: int = 0
    used_bytes: int = 0

    def allows(self, step: Step) -> bool:
        if step.action == StepName.REWRITE_HOT_FILES or step.hot:  # small by construction (hot partitions)
            return True
        if step.action not in (StepName.REWRITE_DATA_FILES, StepName.REWRITE_POSITION_DELETE_FILES):
            return True
        if self.used_rewrites >= self.rewrites:
            return False
        # The first rewrite of a cycle always runs, so a table larger than the byte budget is not starved.
        return self.used_rewrites == 0 or self.used_bytes + step.expected_bytes <= self.rewrite_bytes

    def spend(self, step: Step) -> None:
        if step.action in (StepName.REWRITE_DATA_FILES, StepName.REWRITE_POSITION_DELETE_FILES) and not step.hot:
            self.used_rewrites += 1
        if step.action.rewrites_data:
            self.used_bytes += step.expected_bytes


@dataclass
class ActionRecord:
    table: str
    step: StepName
    outcome: str  # ok | failed | dry_run | over_budget
    started_at_ms: int
    seconds: float = 0.0
    attempts: int = 0
    result: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    files_in: int | None = None
    files_out: int | None = None
    bytes_in: int | None = None


def _quote(value: Any) -> str:
    text = str(value)
    if not set(text) <= _SAFE_LITERAL or "'" in text:
        raise ValueError(f"refusing to put an unexpected value into procedure SQL: {text[:200]!r}")
    return f"'{text}'"


def _quote_filter(text: str) -> str:
    """A planner-built filter (it holds single-quoted literals) as a double-quoted SQL string."""
    if not set(text) <= _SAFE_LITERAL | {"'"} or '"' in text or "\\" in text:
        raise ValueError(f"refusing to put an unexpected filter into procedure SQL: {text[:200]!r}")
    return f'"{text}"'


def procedure_sql(catalog: str, step: Step) -> str:
    """``CALL <catalog>.system.<procedure>(...)`` for a planned step."""
    args = [f"table => {_quote(step.table)}"]  # catalog-qualified: no lookup of the namespace as a catalog
    a = step.args
    if step.action == StepName.EXPIRE_SNAPSHOTS:
        args += [f"older_than => TIMESTAMP {_quote(a['older_than'])}", f"retain_last => {int(a['retain_last'])}"]
    elif step.action.rewrites_data:
        if step.action != StepName.REWRITE_POSITION_DELETE_FILES:
            args.append(f"strategy => {_quote(a.get('strategy', 'binpack'))}")
            if a.get("sort_order"):
                args.append(f"sort_order => {_quote(a['sort_order'])}")
        if a.get("where"):
            args.append(f"where => {_quote_filter(a['where'])}")
        if step.options:
            pairs = ", ".join(f"{_quote(k)}, {_quote(v)}" for k, v in step.options.items())
            args.append(f"options => map({pairs})")
    return f"CALL {catalog}.system.{step.action.procedure}({', '.join(args)})"


def _utc_ms(text: str) -> int:
    """Epoch milliseconds of a plan's ``YYYY-MM-DD HH:MM:SS`` UTC timestamp."""
    return int(datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp() * 1000)


def _counts(step: str, rows: list[dict[str, Any]]) -> tuple[int | None, int | None, int | None]:
    if not rows:
        return None, None, None
    r = rows[0]
    if step in (StepName.REWRITE_DATA_FILES, StepName.REWRITE_HOT_FILES):
        return r.get("rewritten_data_files_count"), r.get("added_data_files_count"), r.get("rewritten_bytes_count")
    if step == StepName.REWRITE_POSITION_DELETE_FILES:
        return r.get("rewritten_delete_files_count"), r.get("added_delete_files_count"), r.get("rewritten_bytes_count")
    if step == StepName.REWRITE_MANIFESTS:
        return r.get("rewritten_manifests_count"), r.get("added_manifests_count"), None
    if step == StepName.EXPIRE_SNAPSHOTS:
        if "expired_snapshots" in r:  # in the driver: Iceberg's API reports no file counts
            return None, None, None
        return r.get("deleted_data_files_count"), 0, None
    return None, None, None


class Executor:
    """Runs plan steps with retries and writes every action to the log table.

    ``deferred``: actions are held until :meth:`flush` (one log append per maintenance cycle instead of
    one per table: an append is a Spark job and an Iceberg commit, ~0.5 CPU-seconds on 2 cores). A
    crash before the flush loses those log rows, not the actions: each is committed in its table."""

    def __init__(self, spark: SparkSession, catalog: str, log_table: str, retries: int = 3,
                 backoff_seconds: float = 2.0, pool: str | None = "icetide_maintenance",
                 in_flight_since_ms: Callable[[], int | None] | None = None, deferred: bool = False) -> None:
        self.deferred, self.pending = deferred, list[tuple[Step, ActionRecord]]()
        self.in_flight_since_ms = in_flight_since_ms
        self.spark = spark
        self.catalog = catalog
        self.log_table = log_table
        self.retries = retries
        self.backoff = backoff_seconds
        self.pool = pool

    def run(self, plans: list[TablePlan], budget: Budget, dry_run: bool = False) -> list[ActionRecord]:
        """Execute plans in the given order (see planner.order); record and return every action."""
        done: list[tuple[Step, ActionRecord]] = []
        if self.pool:
            self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", self.pool)
        try:
            for plan in plans:
                for step in plan.steps:
                    done.append((step, self._run_step(step, budget, dry_run)))
                    if done[-1][1].outcome == "ok" and step.action in REWRITES:
                        faults.point("between_rewrite_and_expiry", f"{step.table} {step.action}")
        finally:
            if self.pool:
                self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
            self._record(done)
        return [r for _, r in done]

    def _run_step(self, step: Step, budget: Budget, dry_run: bool) -> ActionRecord:
        rec = ActionRecord(step.table, step.action, "ok", int(time.time() * 1000))
        if not budget.allows(step):
            rec.outcome = "over_budget"
            log.info("maintenance: %s %s deferred (budget spent this cycle)", step.table, step.action)
            return rec
        started = time.monotonic()
        if dry_run and step.action != StepName.REMOVE_ORPHAN_FILES:
            rec.outcome = "dry_run"
            return rec
        if step.action == StepName.REMOVE_ORPHAN_FILES:
            return self._orphans(step, rec, dry_run, started)
        sql = procedure_sql(self.catalog, step)
        for attempt in range(1, self.retries + 2):
            rec.attempts = attempt
            try:
                expiry = step.action == StepName.EXPIRE_SNAPSHOTS
                if expiry and step.args.get("via") == "driver":
                    # The offsets icetide's ingest recorded must outlive the snapshots that carry them.
                    mirror_in_driver(self.spark, step.table)
                    rows = [self._expire_in_driver(step)]
                else:
                    if expiry:  # the same mirror, from Spark's metadata tables
                        catalog, _, short = step.table.partition(".")
                        meta = SparkMeta(self.spark, catalog)
                        for p, wm in mirrors_needed(meta.properties(short), meta.snapshots(short)).items():
                            set_property(self.spark, step.table, p, wm)
                    log.info("maintenance: %s", sql)
                    guard = (inflight.protecting(lambda: TableIO.of(self.spark, step.table), f"{step.table} "
                                                 f"{step.action}") if step.action in REWRITES else nullcontext())
                    with guard:  # a rewrite's new files are in flight until it commits
                        rows = [r.asDict(recursive=True) for r in self.spark.sql(sql).collect()]
                rec.result = rows
                rec.files_in, rec.files_out, rec.bytes_in = _counts(step.action, rows)
                rec.outcome = "ok"
                budget.spend(step)
                break
            except Exception as e:
                rec.error = error_line(e)
                if not is_commit_conflict(e) or attempt > self.retries:
                    rec.outcome = "failed"
                    log.error("maintenance: %s %s failed: %s", step.table, step.action, rec.error)
                    break
                wait = self.backoff * 2 ** (attempt - 1)
                log.warning("maintenance: %s %s conflicted (%s); retry %d in %.0fs", step.table, step.action,
                            rec.error, attempt, wait)
                time.sleep(wait)
        rec.seconds = round(time.monotonic() - started, 3)
        return rec

    def _expire_in_driver(self, step: Step) -> dict[str, Any]:
        from icetide.lake.tables import expire_in_driver

        older = _utc_ms(step.args["older_than"])
        log.info("maintenance: %s ExpireSnapshots in the driver: older than %s UTC, retain last %d",
                 step.table, step.args["older_than"], int(step.args["retain_last"]))
        return {"expired_snapshots": expire_in_driver(self.spark, step.table, older, int(step.args["retain_last"]))}

    def _orphans(self, step: Step, rec: ActionRecord, dry_run: bool, started: float) -> ActionRecord:
        from icetide.maintenance.orphans import remove_orphans

        rec.attempts = 1
        try:
            older = _utc_ms(step.args["older_than"])
            paths = remove_orphans(self.spark, step.table, older, dry_run, self.in_flight_since_ms)
            rec.result = [{"orphan_file_location": p} for p in paths]
            rec.files_in, rec.files_out = len(paths), 0
            rec.outcome = "dry_run" if dry_run else "ok"
        except Exception as e:
            rec.outcome, rec.error = "failed", error_line(e)
            log.error("maintenance: %s remove_orphan_files failed: %s", step.table, rec.error)
        rec.seconds = round(time.monotonic() - started, 3)
        return rec

    def record(self, records: list[ActionRecord]) -> None:
        """Write actions taken outside a plan (retention) to the action log."""
        self._record([(Step(r.table, r.step, "retention of icetide's own table", {}, "rows past retention deleted"), r)
                      for r in records])

    def flush(self) -> None:
        """Write the deferred actions (one append)."""
        done, self.pending = self.pending, []
        self._write(done)

    def _record(self, done: list[tuple[Step, ActionRecord]]) -> None:
        if self.deferred:
            self.pending += done
        else:
            self._write(done)

    def _write(self, done: list[tuple[Step, ActionRecord]]) -> None:
        if not done:
            return
        rows = log_rows(done)
        table = ensure_table(self.spark, self.catalog, self.log_table, LOG_SCHEMA, ["days(started_at)"],
                             {"format-version": "2"})
        self.spark.createDataFrame(rows, LOG_SCHEMA).writeTo(table).append()


def log_rows(done: list[tuple[Step, ActionRecord]]) -> list[dict[str, Any]]:
    """The action log's rows for ``done``. Every free text (error, result, reason) passes through
    :func:`~icetide.secrets.scrub`: a procedure's error can quote a URI or a credential."""
    rows = []
    for s, r in done:
        rows.append({
            "started_at": datetime.fromtimestamp(r.started_at_ms / 1000, UTC).replace(tzinfo=None),
            "table_name": r.table, "step": r.step, "outcome": r.outcome, "reason": scrub(s.reason),
            "figures": json.dumps(s.figures), "expected": s.expected,
            "arguments": scrub(json.dumps({"args": s.args, "options": s.options, "partitions": s.partitions})),
            # cut after scrubbing: a cut through a secret would leave its start unmasked
            "result": scrub(json.dumps(r.result, default=str))[:100_000], "files_in": r.files_in,
            "files_out": r.files_out, "bytes_in": r.bytes_in, "attempts": r.attempts,
            "seconds": r.seconds, "error": scrub(r.error) if r.error else r.error,
        })
    return rows


#: how far back :func:`action_history` looks: the planner's waiting bonus is full after 10 hours
LAST_MAINTAINED_WINDOW_MS = 24 * 3_600_000


@dataclass
class ActionHistory:
    """What the planner reads from icetide's action log (the last day of it)."""
    last_ok: dict[str, int] = field(default_factory=dict)  # table → epoch ms of its last successful step
    compacted: dict[str, dict[str, int]] = field(default_factory=dict)  # table → partition → last full compaction


def action_history(reader: MetaReader, log_table: str, now_ms: int | None = None) -> ActionHistory:
    """Per table, when icetide last ran a successful step on it, and per partition, when it last compacted
    it fully (``rewrite_data_files``), within the last day (older is the same to the planner as never:
    see ``planner.priority`` and ``hot.first_close``). Rows written before partitions were logged count
    for ``last_ok`` only."""
    out = ActionHistory()
    if not reader.exists(log_table):
        return out
    since = (now_ms or int(time.time() * 1000)) - LAST_MAINTAINED_WINDOW_MS
    for r in reader.rows(log_table, ["table_name", "step", "outcome", "started_at", "arguments"],
                         ("started_at", since)):
        if r["outcome"] != "ok" or r["started_at"] is None:
            continue
        t, ms = r["table_name"], int(r["started_at"].timestamp() * 1000)
        out.last_ok[t] = max(ms, out.last_ok.get(t, ms))
        if r["step"] == StepName.REWRITE_DATA_FILES:
            done = out.compacted.setdefault(t, {})
            for part in _logged_partitions(r["arguments"]):
                done[part] = max(ms, done.get(part, ms))
    return out


def _logged_partitions(arguments: str | None) -> list[str]:
    try:
        parts = json.loads(arguments or "{}").get("partitions", [])
    except (ValueError, AttributeError):
        return []
    return [p for p in parts if isinstance(p, str)] if isinstance(parts, list) else []
