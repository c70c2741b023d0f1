"""Deterministic fault injection, for crash-safety tests: the process kills itself at a named point.

``ICETIDE_FAULT=<point>[@<n>][:<text>]`` (read once, here and nowhere else) makes the process send
SIGKILL to its process group (the Python driver and its Spark JVM, when it leads the group; else
itself) the ``n``-th time (default 1) it reaches ``point`` with a detail containing ``text``.
Unset, :func:`point` is a dictionary lookup. Points:

- ``before_table_commit`` / ``after_table_commit``: around each table's commit (detail: table);
- ``between_merge_and_tombstones``: after a CDC MERGE committed, before its tombstones (table);
- ``between_write_and_publish``: a write Spark commits itself (a MERGE, a fenced append) is on its
  branch, not yet on main (detail: table);
- ``after_batch_before_checkpoint``: a batch wrote every table, Spark has not checkpointed it;
- ``between_rewrite_and_expiry``: maintenance committed a rewrite of a table and has not yet run
  the table's next step (detail: table and step).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)

ENV = "ICETIDE_FAULT"
POINTS = frozenset({"before_table_commit", "after_table_commit", "between_merge_and_tombstones",
                    "between_write_and_publish",
                    "after_batch_before_checkpoint", "between_rewrite_and_expiry"})


@dataclass
class Fault:
    point: str
    nth: int = 1
    text: str = ""
    seen: int = 0


def parse(spec: str | None) -> Fault | None:
    """``point[@n][:text]`` → :class:`Fault`; ValueError naming the variable when malformed."""
    if not spec:
        return None
    head, _, text = spec.partition(":")
    name, _, nth = head.partition("@")
    if name not in POINTS:
        raise ValueError(f"{ENV}={spec!r}: unknown point {name!r}; one of {', '.join(sorted(POINTS))}")
    if nth and (not nth.isdigit() or int(nth) < 1):
        raise ValueError(f"{ENV}={spec!r}: the count after @ must be a positive integer")
    return Fault(name, int(nth or 1), text)


_FAULT = parse(os.environ.get(ENV))
_LOCK = threading.Lock()


def point(name: str, detail: str = "") -> None:
    """Reached ``name`` (one of :data:`POINTS`); kills the process if ``ICETIDE_FAULT`` says so."""
    fault = _FAULT
    if fault is None or fault.point != name or fault.text not in detail:
        return
    with _LOCK:
        fault.seen += 1
        if fault.seen != fault.nth:
            return
    message = f"icetide fault injection: killing the process at {name} ({detail})"
    log.warning(message)
    print(message, file=sys.stderr, flush=True)
    for h in logging.getLogger().handlers:
        h.flush()
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
