"""The timing plugin's figures (#38): CPU shares from /proc/stat counters and the before/after table."""

from __future__ import annotations

import pytest

from tests.fixtures.timing import _share, compare

pytestmark = pytest.mark.unit


def test_cpu_share_is_busy_over_total_jiffies_and_none_without_counters() -> None:
    assert _share((100, 1000), (250, 1200)) == 0.75
    assert _share(None, (1, 2)) is None and _share((5, 10), (5, 10)) is None


def test_compare_lists_every_module_longest_first_with_cpu_where_measured() -> None:
    before = {"wall_seconds": 100.0, "cores": 2, "cpu": 0.5, "workers": 1, "modules": [
        {"module": "tests/integration/test_a.py", "tests": 1, "seconds": 60.0, "cpu": 0.9},
        {"module": "tests/integration/test_b.py", "tests": 2, "seconds": 40.0, "cpu": 0.25}]}
    after = {"wall_seconds": 30.0, "cores": 2, "cpu": 0.95, "workers": 3, "modules": [
        {"module": "tests/integration/test_b.py", "tests": 2, "seconds": 45.0, "cpu": None},
        {"module": "tests/integration/test_c.py", "tests": 1, "seconds": 5.0, "cpu": None}]}
    text = compare(before, after)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == ["| `integration/test_a.py` | 60 (90%) | — |", "| `integration/test_b.py` | 40 (25%) | 45 |",
                    "| `integration/test_c.py` | — | 5 |"]
    assert "before: pytest wall 100 s with 1 worker(s), 100 s of module time, machine CPU busy 50% of 2 cores" in text
    assert "after: pytest wall 30 s with 3 worker(s), 50 s of module time, machine CPU busy 95% of 2 cores" in text
