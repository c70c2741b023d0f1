"""Restart marks of topics deleted and created again (#41), kept in ``icetide.restarts.<pipeline>``
(see :mod:`icetide.lake.offsets`): per topic, the newest tagged snapshot whose offsets (and older
ones') belong to the deleted topic, the new topic's id ("" when the run that marked it did not know
it) and the run that wrote the mark.

Invariants: only the pipeline writes the property, and only when it sets a topic aside; an entry
there wins outright over the marks the watermark property carries (whatever the clocks say); a
watermark property counts for a marked topic only if it carries that very mark (it was written
knowing it), and so does a snapshot committed after the mark (its summary's
``icetide.restart-marks``: the marks its writer knew).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from icetide.lake.offset_codec import safe_value

#: The newest tagged snapshot (run, batch, committed at ms) when a topic was found recreated.
Mark = tuple[str, int, int]


@dataclass(frozen=True)
class Restarts:
    """``icetide.restarts.<pipeline>``: per recreated topic, its mark, the new topic's id ("":
    unknown) and the run that wrote the mark."""

    marks: dict[str, Mark] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    by: dict[str, str] = field(default_factory=dict)

    def with_marks(self, marks: dict[str, Mark], ids: dict[str, str | None], run: str) -> Restarts:
        """These entries, replaced for ``marks``' topics (written by ``run``, ids as known: None unknown)."""
        return Restarts({**self.marks, **marks}, {**self.ids, **{t: ids.get(t) or "" for t in marks}},
                        {**self.by, **{t: run for t in marks}})

    def value(self) -> str:
        """The property value, ``{"topic": [run, batch, committed_at_ms, id, by]}`` (checked like the watermark's)."""
        raw = {t: [*m, self.ids.get(t, ""), self.by.get(t, "")] for t, m in sorted(self.marks.items())}
        return safe_value(json.dumps(raw, separators=(",", ":")))

    @classmethod
    def parse(cls, text: str | None) -> Restarts:
        raw = json.loads(text) if text else {}
        return cls({str(t): (str(m[0]), int(m[1]), int(m[2])) for t, m in raw.items()},
                   {str(t): str(m[3]) if len(m) > 3 and m[3] else "" for t, m in raw.items()},
                   {str(t): str(m[4]) for t, m in raw.items() if len(m) > 4 and m[4]})
