"""In-flight markers read by orphan cleanup in any process (JVM-free: a FileIO stand-in)."""

from __future__ import annotations

import json
from typing import Any

from icetide.lake import inflight


class _IO:
    """What :func:`icetide.lake.inflight.oldest` uses of a TableIO: listing with creation times, reads."""

    location = "file:/wh/db/t"

    def __init__(self, files: dict[str, tuple[bytes, int | None]]) -> None:
        self.files = files
        self.reads = 0

    def list_files(self, folder: str, prefix: str) -> dict[str, int | None]:
        return {p: c for p, (_, c) in self.files.items() if p.startswith(f"{folder}/{prefix}")}

    def read(self, path: str) -> bytes | None:
        self.reads += 1
        return self.files[path][0]


def _marker(since: int) -> bytes:
    return json.dumps({"pipeline": "p", "run": "r1", "since_ms": since}).encode()


def test_a_marker_read_while_it_is_written_still_protects_the_files_after_it() -> None:
    """#41: a marker read while a file system overwrites it (truncated first) was ignored, so
    orphan cleanup in another process could delete the files of the batch it protects."""
    now = 10_000_000
    folder = f"{_IO.location}/{inflight.FOLDER}/{inflight.PREFIX}"
    io: Any = _IO({f"{folder}p--r1.json": (b'{"pipeline": "p", "ru', 9_000_000),
                   f"{folder}p--r2.json": (_marker(9_500_000), 9_500_000)})
    assert inflight.oldest(io, now, retry_s=0) == 9_000_000  # the torn one, by its file's creation
    io.files[f"{folder}p--r1.json"] = (b"", None)  # a store that does not tell a file's creation
    assert inflight.oldest(io, now, retry_s=0) == 9_500_000
    io.files[f"{folder}p--r1.json"] = (_marker(8_000_000), 7_000_000)  # readable: its own since_ms
    assert inflight.oldest(io, now, retry_s=0) == 8_000_000
    stale = now - inflight.STALE_AFTER_MS - 1
    io.files = {f"{folder}p--r1.json": (b"{", stale)}  # a torn marker of a crashed run goes stale too
    assert inflight.oldest(io, now, retry_s=0) is None


class _Rewritten(_IO):
    """A marker unreadable on the first read only (the writer's overwrite finished meanwhile)."""

    def read(self, path: str) -> bytes | None:
        self.reads += 1
        return b"" if self.reads == 1 else _marker(9_100_000)


def test_a_marker_being_written_is_read_again() -> None:
    io: Any = _Rewritten({f"{_IO.location}/{inflight.FOLDER}/{inflight.PREFIX}p--r1.json": (b"", 9_000_000)})
    assert inflight.oldest(io, 10_000_000, retry_s=0.01) == 9_100_000 and io.reads == 2


class _Store:
    location = "s3://wh/db/t"

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def write(self, path: str, data: bytes) -> None:
        self.files[path] = data

    def delete(self, path: str) -> None:
        self.files.pop(path, None)


def test_a_maintenance_rewrite_is_in_flight_until_it_ends() -> None:
    """#41: a compaction's new files were protected by nothing but the age floor, so orphan cleanup
    in another process (a standby run, `icetide maintain`) with a short floor could delete them
    before the rewrite committed."""
    store = _Store()
    seen: list[dict[str, Any]] = []
    with inflight.protecting(lambda: store, "db.t rewrite_data_files"):  # type: ignore[arg-type,return-value]
        seen = [json.loads(v) for v in store.files.values()]
    assert [m["pipeline"] for m in seen] == [inflight.MAINTENANCE] and "base" not in seen[0]
    assert store.files == {}  # cleared after the rewrite

    def unreachable() -> Any:
        raise OSError("store down")

    ran = []
    with inflight.protecting(unreachable, "db.t rewrite_data_files"):
        ran.append(1)  # the rewrite still runs (unprotected, warned)
    assert ran == [1]
