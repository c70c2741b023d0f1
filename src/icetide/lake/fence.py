"""Fenced commits: a commit of a pipeline lands only where its ledger is still the one the batch
started from (icetide's JVM ``io.icetide.iceberg.LedgerFence``, validated inside Iceberg's commit).

Two ways in, one rule:

- :func:`fenced_append`: data files icetide's own writer wrote, appended in one fenced commit;
- :func:`fenced_write`: a write Spark commits itself (a CDC ``MERGE``, an append icetide's writer
  refuses), made to a branch staged at main's head once the fence validated it, then landed on
  main: fast-forwarded while main has not moved, else replayed onto main's new head in one commit
  that validates the fence again and the conflicts Spark validates for a write straight to main.

The fence's refusal is :class:`~icetide.errors.FencedError` (nothing landed); a conflict with a
concurrent commit is Iceberg's ``ValidationException`` (transient: write again on the new head).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from icetide import faults
from icetide.secrets import error_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

FENCE_CLASS = "io.icetide.iceberg.LedgerFence"


@dataclass(frozen=True)
class Fence:
    """What a fenced write expects: the newest commit of ``pipeline`` on the table is (run, batch)
    (``run`` None: no commit of it); ``branch`` is where this run's writes are staged."""

    pipeline: str
    run: str | None
    batch: int
    branch: str
    #: called once the write is on the branch, right before it lands on main; raising lands nothing
    before_publish: Callable[[], None] | None = None


def fenced_append(spark: SparkSession, table: str, files: object, tags: dict[str, str], pipeline: str,
                  run: str | None, batch: int) -> str | None:
    """Append ``files`` to ``table`` (qualified) tagged with ``tags``, only if its newest commit of
    ``pipeline`` is still (run, batch) (None: no commit of it); else the fence's message."""
    jvm: Any = spark._jvm
    table_obj = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    props = jvm.java.util.HashMap()
    for k, v in tags.items():
        props.put(k, v)
    props.put("spark.app.id", spark.sparkContext.applicationId)
    refused = jvm.io.icetide.iceberg.LedgerFence.append(table_obj, files, props, pipeline, run, batch)
    return None if refused is None else str(refused)


def fenced_write(spark: SparkSession, table: str, fence: Fence, write: Callable[[str], None],
                 merge: bool = False) -> None:
    """Run ``write(target)`` (it commits one snapshot to ``target``, a branch of ``table``) and land
    it on main, fenced: :class:`~icetide.errors.FencedError` if the fence refuses (nothing landed,
    the branch removed); a conflict with what landed on main meanwhile raises Iceberg's error.
    ``merge``: the write read the table (a MERGE), so a replay checks what Spark checks for one."""
    from icetide.errors import FENCE_MARKER, FencedError

    jvm: Any = spark._jvm
    ledger_fence = jvm.io.icetide.iceberg.LedgerFence
    handle = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    staged = str(ledger_fence.stage(handle, fence.branch, fence.pipeline, fence.run, fence.batch))
    if staged.startswith(FENCE_MARKER) or not staged.lstrip("-").isdigit():
        raise FencedError(staged)
    try:
        write(f"{table}.branch_{fence.branch}")  # reads the branch (main's head when staged), commits to it
        faults.point("between_write_and_publish", table)
        if fence.before_publish is not None:
            fence.before_publish()
        refused = ledger_fence.publish(handle, fence.branch, int(staged), merge, fence.pipeline, fence.run,
                                       fence.batch)
        if refused is not None:
            raise FencedError(str(refused))
    except BaseException:
        try:
            ledger_fence.drop(handle, fence.branch)
        except Exception as e:  # expires on its own (max ref age)
            log.warning("could not remove branch %s of %s: %s", fence.branch, table, error_line(e, 200))
        raise


class _Callable:
    """A Python function as a ``java.util.concurrent.Callable`` (py4j callback)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.fn()
        except BaseException as e:
            self.error = e
            raise

    class Java:
        implements: ClassVar[list[str]] = ["java.util.concurrent.Callable"]


def with_commit_properties(spark: SparkSession, properties: dict[str, str], fn: Callable[[], None]) -> None:
    """Run ``fn`` so that the Iceberg commit it makes carries ``properties`` in its snapshot summary."""
    from pyspark.java_gateway import ensure_callback_server_started

    sc: Any = spark.sparkContext
    ensure_callback_server_started(sc._gateway)
    jvm: Any = spark._jvm
    props = jvm.java.util.HashMap()
    for k, v in properties.items():
        props.put(k, v)
    call = _Callable(fn)
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            props, call, jvm.java.lang.Class.forName("java.lang.RuntimeException"))
    except Exception:
        if call.error is not None:
            raise call.error from None
        raise


_BRANCH_RE = re.compile(r"icetide_[A-Za-z0-9_-]{1,64}")


def drop_stale_branches(spark: SparkSession, table: str, pipeline: str, run: str) -> list[str]:
    """Remove the branches other runs of ``pipeline`` left on ``table`` (qualified) with a write on
    them that never landed: a crash between a fenced write and its publish (#41, 8: such a branch
    pinned the files its write made for a day, until it expired). Called by a run once it has
    committed to the table, so it is the pipeline's live run there: a paused run whose branch is
    dropped finds it gone when it wakes, a commit conflict, and writes again, fenced. A branch with
    no write of its own (a crash before the write) pins nothing new and is left to expire."""
    from icetide.lake.offsets import K_PIPELINE, K_RUN

    # The table's refs through its Java handle (a map lookup), not a Spark query of its metadata
    # tables: that query is the run's first such job and took ~0.7 s of its first batch.
    jvm: Any = spark._jvm
    handle = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    dropped = []
    for name, ref in dict(handle.refs()).items():
        if not _BRANCH_RE.fullmatch(str(name)) or name == f"icetide_{run}" or not ref.isBranch():
            continue
        snapshot = handle.snapshot(ref.snapshotId())
        summary = dict(snapshot.summary()) if snapshot is not None else {}
        if summary.get(K_PIPELINE) == pipeline and summary.get(K_RUN) != run:
            spark.sql(f"ALTER TABLE {table} DROP BRANCH IF EXISTS `{name}`")
            dropped.append(str(name))
    return dropped
