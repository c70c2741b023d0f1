"""A CDC MERGE that loses a commit race to a compaction is retried inside the batch; anything else
is raised at once. (The real race runs in benchmarks/steady; here the commit is a stand-in.)"""

from __future__ import annotations

from typing import Any

import pytest

from icetide.ingest import cdc

CONFLICT = ("org.apache.iceberg.exceptions.ValidationException: Missing required files to delete: "
            "/warehouse/crm/customers/data/00001.parquet")


def run(monkeypatch: pytest.MonkeyPatch, failures: list[Exception], retries: int = 5) -> tuple[int, list[Any]]:
    calls: list[Any] = []

    def commit(spark: Any, props: dict[str, str], fn: Any) -> None:
        calls.append(props)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]

    monkeypatch.setattr(cdc, "with_commit_properties", commit)
    monkeypatch.setattr(cdc.time, "sleep", lambda s: None)
    used = cdc.merge_retrying_conflicts(None, {"icetide.batch": "7"}, None, "c.crm.customers", None,  # type: ignore[arg-type]
                                        retries=retries)
    return used, calls


def test_conflicts_are_retried_with_the_same_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    used, calls = run(monkeypatch, [RuntimeError(CONFLICT), RuntimeError("CommitFailedException: stale")])
    assert used == 2 and len(calls) == 3
    assert all(c == {"icetide.batch": "7"} for c in calls)


def test_other_errors_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match="AMBIGUOUS_REFERENCE"):
        run(monkeypatch, [RuntimeError("[AMBIGUOUS_REFERENCE_TO_FIELDS] id")])


def test_retries_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match="Missing required files"):
        run(monkeypatch, [RuntimeError(CONFLICT)] * 4, retries=3)


def test_item2_a_fenced_merge_is_refused_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """#31 item 2: the fence's refusal is final for the batch (the run stands by); only commit
    conflicts are retried."""
    from icetide.errors import FencedError

    with pytest.raises(FencedError):
        run(monkeypatch, [FencedError("icetide-fence: pipeline p expected run a batch 3, found run b batch 9")])
    with pytest.raises(RuntimeError, match="icetide-fence"):
        run(monkeypatch, [RuntimeError("ValidationException: icetide-fence: pipeline p expected ...")])
