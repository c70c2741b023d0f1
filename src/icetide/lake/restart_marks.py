"""Restart marks of topics deleted and created again (#41), kept in ``icetide.restarts.<pipeline>``
(see :mod:`icetide.lake.offsets`): per topic, the newest tagged snapshot whose offsets (and older
ones') belong to the deleted topic, and the new topic's id."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from icetide.lake.offset_codec import safe_value

#: The newest tagged snapshot (run, batch, committed at ms) when a topic was found recreated.
Mark = tuple[str, int, int]


def merge_marks(*marks: dict[str, Mark]) -> dict[str, Mark]:
    """Restart marks merged: per topic the newest (a topic recreated twice keeps its second mark)."""
    out: dict[str, Mark] = {}
    for m in marks:
        for t, mark in m.items():
            if t not in out or mark[2] > out[t][2]:
                out[t] = mark
    return out


@dataclass(frozen=True)
class Restarts:
    """``icetide.restarts.<pipeline>``: per recreated topic, its mark and the new topic's id (if known)."""

    marks: dict[str, Mark] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, marks: dict[str, Mark], topic_ids: dict[str, str]) -> Restarts:
        """``marks`` with the ids ``topic_ids`` gives their topics (a watermark's after its restart)."""
        return cls(dict(marks), {t: topic_ids[t] for t in marks if t in topic_ids})

    def value(self) -> str:
        """The property value, ``{"topic": [run, batch, committed_at_ms, id]}`` (checked like the watermark's)."""
        raw = {t: [*m, self.ids.get(t, "")] for t, m in sorted(self.marks.items())}
        return safe_value(json.dumps(raw, separators=(",", ":")))

    @classmethod
    def parse(cls, text: str | None) -> Restarts:
        raw = json.loads(text) if text else {}
        return cls({str(t): (str(m[0]), int(m[1]), int(m[2])) for t, m in raw.items()},
                   {str(t): str(m[3]) for t, m in raw.items() if len(m) > 3 and m[3]})
