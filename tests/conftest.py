"""Marks every test with its tier: ``unit`` (no JVM, no broker) or ``integration`` (the real stack).

``scripts/test.sh -m unit`` runs the fast tier alone.

With workers side by side (``scripts/test.sh`` runs ``-n``, whole modules per worker), modules are
handed out longest first, by the seconds of a recorded run (``tests/times.json``, written by the
timing plugin with ``ICETIDE_TEST_TIMES``): the longest modules start at once instead of last, so
no worker is left with one long module when the others are done. A module the file does not know
counts as a long one. The order inside a module is never changed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.fixtures.timing"]

TIMES = Path(__file__).with_name("times.json")
UNKNOWN_SECONDS = 120.0


def _recorded_seconds() -> dict[str, float]:
    try:
        figures = json.loads(TIMES.read_text())
        return {m["module"]: float(m["seconds"]) for m in figures["modules"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = "unit" if "/tests/unit/" in str(item.path) else "integration"
        item.add_marker(getattr(pytest.mark, tier))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # one process: the files' order (the unit tier first)
    seconds = _recorded_seconds()
    rank = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        rank.setdefault(module, (-seconds.get(module, UNKNOWN_SECONDS), len(rank)))
    items.sort(key=lambda it: rank[it.nodeid.split("::", 1)[0]])  # stable: a module's own order kept
