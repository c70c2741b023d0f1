"""In-flight markers: a writer's record of the batch it is writing, visible to other processes.

Before icetide writes a table it puts ``_icetide/inflight-<pipeline>-<run>.json`` under the table
location (``{"pipeline", "run", "since_ms"}``) and removes it after the commit, through the table's
own FileIO (:mod:`icetide.lake.table_io`), so markers work on any warehouse the catalog does. The
folder is outside ``metadata/`` and ``data/`` on purpose: catalogs that own their buckets (S3 Tables,
SeaweedFS table buckets) refuse unknown files there but leave ``_``-prefixed folders to the writer,
and Iceberg's orphan listing skips hidden (``_``) folders. Orphan
cleanup in *any* process (a standalone ``icetide maintain`` too) never deletes files newer than
the oldest live marker's ``since_ms``, so the data files of an uncommitted batch survive however
short the age floor is. Markers are per run: two runs of one pipeline (a standby that took over
while the first run was only paused) each keep their own, and a run clears only its own, so a
paused run's staged files stay protected whatever the other run does, for as long as its commit
could still land (:func:`sweep`). A marker older than
``STALE_AFTER_MS`` belongs to a writer that crashed; it no longer protects anything (the crashed
batch's files are exactly what cleanup is for).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator

from icetide.identifiers import validate_pipeline
from icetide.lake.table_io import TableIO
from icetide.secrets import error_line

log = logging.getLogger(__name__)
FOLDER = "_icetide"
PREFIX = "inflight-"
#: where icetide before 0.1 (November 2026) put its markers; still honoured, so a writer of the old
#: version keeps its in-flight files safe from a new version's cleanup during a rolling upgrade
LEGACY = ("metadata", "icetide-inflight-")
STALE_AFTER_MS = 6 * 3600 * 1000
_RUN_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def marker_path(table_location: str, pipeline: str, run: str) -> str:
    if not _RUN_RE.fullmatch(run):
        raise ValueError(f"not a run id: {run[:40]!r}")
    return f"{table_location.rstrip('/')}/{FOLDER}/{PREFIX}{validate_pipeline(pipeline)}--{run}.json"


def is_marker(path: str) -> bool:
    return f"/{FOLDER}/{PREFIX}" in path or f"/{LEGACY[0]}/{LEGACY[1]}" in path


def mark(io: TableIO, pipeline: str, run: str, since_ms: int,
         base: tuple[str | None, int] | None = None) -> None:
    """``base``: the newest commit of the pipeline the write's fenced commit expects (run, batch)."""
    body: dict[str, object] = {"pipeline": pipeline, "run": run, "since_ms": since_ms}
    if base is not None:
        body["base"] = list(base)
    io.write(marker_path(io.location, pipeline, run), json.dumps(body).encode())


def clear(io: TableIO, pipeline: str, run: str) -> None:
    """Remove this run's marker (never another run's)."""
    io.delete(marker_path(io.location, pipeline, run))


def sweep(io: TableIO, pipeline: str, run: str, newest: tuple[str, int]) -> list[str]:
    """After this run's commit ``newest`` (run, batch) landed: remove the markers of other runs of
    the pipeline whose write expects another base. Their fenced commits can never land (the
    pipeline's newest commit is now this one), so their files are garbage: a crashed run's marker
    stops holding orphan cleanup back, and a paused run's is kept only while it could still commit.
    Markers without a base (other versions) are left to go stale. Returns the removed runs."""
    removed = []
    for path in io.list_names(f"{io.location}/{FOLDER}", f"{PREFIX}{validate_pipeline(pipeline)}--"):
        try:
            raw = json.loads((io.read(path) or b"").decode())
        except Exception:
            continue
        other, base = raw.get("run"), raw.get("base")
        if other == run or raw.get("pipeline") != pipeline or not isinstance(base, list) or len(base) != 2:
            continue
        if (base[0], base[1]) != newest:
            io.delete(path)
            removed.append(str(other))
    return removed


def oldest(io: TableIO, now_ms: int | None = None, retry_s: float = 0.2) -> int | None:
    """``since_ms`` of the oldest live marker under the table location (None: nothing in flight).

    A marker that cannot be read (read while it is written: a file system's overwrite truncates
    first; or torn by a crash) is read again after ``retry_s``; still unreadable, it protects what
    is newer than its file's creation (it is written before the files it protects), and goes stale
    like any other. Only where the store does not tell a file's creation is it ignored (warned)."""
    now_ms = now_ms or int(time.time() * 1000)
    found: list[int] = []
    files = {**io.list_files(f"{io.location}/{FOLDER}", PREFIX),
             **io.list_files(f"{io.location}/{LEGACY[0]}", LEGACY[1])}
    for path, created in files.items():
        since = _since(io, path)
        if since is None and retry_s > 0:
            time.sleep(retry_s)
            since = _since(io, path)
        if since is None:
            if created is None:
                log.warning("unreadable in-flight marker %s; ignored", path.rsplit("/", 1)[-1])
                continue
            log.warning("unreadable in-flight marker %s: it protects the files newer than itself",
                        path.rsplit("/", 1)[-1])
            since = created
        if now_ms - since < STALE_AFTER_MS:
            found.append(since)
    return min(found) if found else None


def _since(io: TableIO, path: str) -> int | None:
    try:
        return int(json.loads((io.read(path) or b"").decode())["since_ms"])
    except Exception:
        return None


#: the owner of a maintenance rewrite's marker (a rewrite commits no offsets: no base, never swept)
MAINTENANCE = "icetide-maintenance"


@contextlib.contextmanager
def protecting(io: Callable[[], TableIO], what: str) -> Iterator[None]:
    """A marker for the duration of a write that is no pipeline's batch (a maintenance rewrite:
    its new files are uncommitted until its commit), so that orphan cleanup in another process
    keeps them whatever its age floor. A marker that cannot be written is warned about and the
    write goes on unprotected, as it did before markers."""
    run, table_io = uuid.uuid4().hex[:16], None
    try:
        table_io = io()
        mark(table_io, MAINTENANCE, run, int(time.time() * 1000))
    except Exception as e:
        log.warning("no in-flight marker for %s (%s): orphan cleanup elsewhere may not see its new files",
                    what, error_line(e, 200))
        table_io = None
    try:
        yield
    finally:
        if table_io is not None:
            with contextlib.suppress(Exception):  # a marker left behind goes stale
                clear(table_io, MAINTENANCE, run)
