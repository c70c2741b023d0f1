"""Marks every test with its tier: ``unit`` (no JVM, no broker) or ``integration`` (the real stack).

``scripts/test.sh -m unit`` runs the fast tier alone."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = "unit" if "/tests/unit/" in str(item.path) else "integration"
        item.add_marker(getattr(pytest.mark, tier))
