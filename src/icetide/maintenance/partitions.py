"""From a partition (as the metadata tables show it) to a safe ``where`` filter on source columns.

Values are data: only values matching a narrow alphabet become literals; any other partition is
left alone, with a reason, rather than quoted.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime, timedelta
from typing import Any

from icetide.lake.meta import SpecField

_SAFE_STR = re.compile(r"^[A-Za-z0-9_.:+ -]{0,200}$")
_EPOCH = datetime(1970, 1, 1)


#: A field of the current partition spec (read by :meth:`icetide.lake.meta.MetaReader.spec`).
PartitionField = SpecField


def _literal(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str) and _SAFE_STR.fullmatch(value):
        return f"'{value}'"
    return None


def _ts(d: datetime) -> str:
    return f"TIMESTAMP '{d:%Y-%m-%d %H:%M:%S}'"


def _time_range(transform: str, value: Any) -> tuple[datetime, datetime] | None:
    if transform == "days":
        d = date.fromisoformat(value) if isinstance(value, str) else (_EPOCH + timedelta(days=int(value))).date()
        start = datetime(d.year, d.month, d.day)
        return start, start + timedelta(days=1)
    if transform == "hours":
        start = _EPOCH + timedelta(hours=int(value))
        return start, start + timedelta(hours=1)
    if transform == "months":
        y, m = divmod(int(value), 12)
        start = datetime(1970 + y, m + 1, 1)
        return start, datetime(start.year + (start.month == 12), start.month % 12 + 1, 1)
    if transform == "years":
        return datetime(1970 + int(value), 1, 1), datetime(1971 + int(value), 1, 1)
    return None


def time_start(fields: list[PartitionField], partition_json: str) -> datetime | None:
    """Start of the partition's range on the spec's first time field (years/months/days/hours); None
    when the spec has none or the value is null or unreadable."""
    values = json.loads(partition_json) if partition_json else {}
    for f in fields:
        if f.transform in ("years", "months", "days", "hours"):
            v = values.get(f.name)
            try:
                rng = _time_range(f.transform, v) if v is not None else None
            except (ValueError, TypeError):
                return None
            return rng[0] if rng else None
    return None


def where(fields: list[PartitionField], partition_json: str) -> str | None:
    """A filter selecting exactly this partition's rows, or None if it cannot be expressed safely."""
    if not fields:
        return None
    values = json.loads(partition_json) if partition_json else {}
    parts = []
    for f in fields:
        v = values.get(f.name)
        if v is None:  # every transform maps a null source value to a null partition value
            parts.append(f"{f.source} IS NULL")
            continue
        if f.transform == "identity":
            lit = _literal(v)
            if lit is None:
                return None
            parts.append(f"{f.source} = {lit}")
        else:
            try:
                rng = _time_range(f.transform, v)
            except (ValueError, TypeError):
                return None
            if rng is None:  # bucket / truncate / void: not expressible on the source column
                return None
            parts.append(f"{f.source} >= {_ts(rng[0])} AND {f.source} < {_ts(rng[1])}")
    return " AND ".join(parts)
