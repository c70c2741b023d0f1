"""The only SQL maintenance builds: procedure calls from planned steps, with a narrow literal guard."""

from __future__ import annotations

import pytest

from icetide.config.policy import DEFAULT_STEPS, StepName
from icetide.errors import ConfigError, TransientError, is_commit_conflict
from icetide.maintenance.executor import Budget, procedure_sql
from icetide.maintenance.planner import Step


def step(action: StepName, **kw: object) -> Step:
    return Step("icetide.raw.events", action, "why", {}, "gain", **kw)  # type: ignore[arg-type]


def test_hot_files_run_as_rewrite_data_files_with_their_options() -> None:
    s = step(StepName.REWRITE_HOT_FILES,
             args={"strategy": "binpack", "where": "(ts >= TIMESTAMP '2026-11-25 00:00:00')"},
             options={"min-file-size-bytes": "1048576", "min-input-files": "2"})
    assert procedure_sql("icetide", s) == (
        "CALL icetide.system.rewrite_data_files(table => 'icetide.raw.events', strategy => 'binpack', "
        "where => \"(ts >= TIMESTAMP '2026-11-25 00:00:00')\", "
        "options => map('min-file-size-bytes', '1048576', 'min-input-files', '2'))")


def test_expire_and_sort() -> None:
    assert procedure_sql("c", step(StepName.EXPIRE_SNAPSHOTS, args={"older_than": "2026-11-25 10:00:00",
                                                                     "retain_last": 20})) == \
        "CALL c.system.expire_snapshots(table => 'icetide.raw.events', older_than => TIMESTAMP " \
        "'2026-11-25 10:00:00', retain_last => 20)"
    sql = procedure_sql("c", step(StepName.REWRITE_DATA_FILES,
                                  args={"strategy": "sort", "sort_order": "zorder(a, b)"}))
    assert "strategy => 'sort', sort_order => 'zorder(a, b)'" in sql


@pytest.mark.parametrize("bad", ["x'; DROP TABLE t; --", "a\\b", 'a"b', "ｘ", "a;b"])
def test_unexpected_values_never_reach_sql(bad: str) -> None:
    with pytest.raises(ValueError, match="refusing to put an unexpected"):
        procedure_sql("c", step(StepName.REWRITE_DATA_FILES, args={"strategy": bad}))
    with pytest.raises(ValueError, match="refusing to put an unexpected"):
        procedure_sql("c", step(StepName.REWRITE_DATA_FILES, args={"where": f"x = '{bad}'"}))


def test_step_names_and_defaults() -> None:
    assert [s.value for s in StepName] == ["expire_snapshots", "remove_orphan_files", "rewrite_hot_files",
                                           "rewrite_data_files", "rewrite_position_delete_files",
                                           "rewrite_manifests", "expire_rows"]
    assert StepName.REMOVE_ORPHAN_FILES not in DEFAULT_STEPS  # opt-in
    assert StepName.EXPIRE_ROWS not in DEFAULT_STEPS  # icetide's own tables only, never planned
    assert StepName.REWRITE_HOT_FILES.procedure == "rewrite_data_files"
    assert StepName.REWRITE_MANIFESTS.procedure == "rewrite_manifests"


def test_budget_counts_full_rewrites_not_minor_ones() -> None:
    b = Budget(rewrites=1, rewrite_bytes=100)
    hot = step(StepName.REWRITE_HOT_FILES, expected_bytes=60)
    full = step(StepName.REWRITE_DATA_FILES, expected_bytes=60)
    assert b.allows(hot)
    b.spend(hot)
    assert b.allows(full)  # the first full rewrite always runs
    b.spend(full)
    assert (b.used_rewrites, b.used_bytes) == (1, 120)
    assert not b.allows(step(StepName.REWRITE_DATA_FILES, expected_bytes=1))
    assert b.allows(step(StepName.REWRITE_HOT_FILES, expected_bytes=10**9))


@pytest.mark.parametrize(("exc", "conflict"), [
    (RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: Table metadata refresh"), True),
    (RuntimeError("ValidationException: Missing required files to delete: /w/a.parquet"), True),
    (RuntimeError("Cannot commit, found new position delete for replaced data file"), True),
    (TransientError("broker hiccup"), True),
    (ConfigError("catalog.uri: bad"), False),
    (RuntimeError("[AMBIGUOUS_REFERENCE_TO_FIELDS] Ambiguous reference to the field id"), False),
    (ValueError("boom"), False),
])
def test_commit_conflicts_are_classified_once(exc: Exception, conflict: bool) -> None:
    assert is_commit_conflict(exc) is conflict


def test_a_deferred_executor_writes_the_cycles_actions_in_one_append(monkeypatch: pytest.MonkeyPatch) -> None:
    from icetide.maintenance.executor import ActionRecord, Executor

    writes: list[list[str]] = []
    ex = Executor(None, "c", "ns.log", deferred=True)  # type: ignore[arg-type]
    monkeypatch.setattr(ex, "_write", lambda done: writes.append([r.table for _, r in done]))
    for t in ("a", "b"):
        ex._record([(step(StepName.REWRITE_HOT_FILES), ActionRecord(t, StepName.REWRITE_HOT_FILES, "ok", 0))])
    ex.record([ActionRecord("c", StepName.EXPIRE_ROWS, "ok", 0)])
    assert writes == []
    ex.flush()
    assert writes == [["a", "b", "c"]]
    ex.flush()  # nothing pending: an empty write, which writes nothing
    assert writes[1:] == [[]] and ex.pending == []
    now = Executor(None, "c", "ns.log")  # type: ignore[arg-type]
    monkeypatch.setattr(now, "_write", lambda done: writes.append([r.table for _, r in done]))
    now._record([(step(StepName.EXPIRE_SNAPSHOTS), ActionRecord("d", StepName.EXPIRE_SNAPSHOTS, "ok", 0))])
    assert writes[-1] == ["d"]
