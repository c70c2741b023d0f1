"""Refused fields → dead letters: which records carry a field schema evolution refused
(:class:`~icetide.ingest.evolution.Evolution` ``.rejected``), with the error class and a message
that says why. The record is dead-lettered whole, so no value is dropped silently."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from icetide.ingest import names
from icetide.ingest.evolution import Evolution, Path
from icetide.ingest.names import RESERVED_PREFIXES


def rejected_condition(evo: Evolution, text: Column | None = None,
                       carries: Callable[[Path, Column], Column] | None = None) -> Column | None:
    """Records that carry a refused field, with the error class (None: no field was refused).
    ``text``: each record's JSON text (:meth:`icetide.ingest.formats.Formats.text`; None: the value);
    ``carries``: per field, whether a record has it where its format says (Avro: its writer schema
    declares it, :meth:`icetide.ingest.formats.Formats.carries`), given the check on the text."""
    if not evo.rejected:
        return None
    text = F.col("value").cast("string") if text is None else text
    nested = sorted({p.given[:-1] for p, _ in evo.rejected if not p.in_list and len(p.given) > 1})
    parents = names.field_texts(text, nested)
    result: Column | None = None
    for p, cls in evo.rejected:
        name = p.given[-1]
        if p.in_list:
            quoted = name.replace("\\E", "\\E\\\\E\\Q")
            hit = text.rlike('"\\Q' + quoted + '\\E"\\s*:')
        else:
            parent = text if len(p.given) == 1 else parents[p.given[:-1]]
            hit = F.coalesce(F.array_contains(F.json_object_keys(parent), F.lit(name)), F.lit(False))
        if carries is not None:
            hit = carries(p, hit)
        result = F.when(hit, F.lit(cls)) if result is None else result.when(hit, F.lit(cls))
    return result


_WHY = {
    "invalid_field": f"a name must not be empty, hold control characters or exceed {names.MAX_LENGTH} characters",
    "ambiguous_field": "equal ignoring case to a column the table has (Spark and Iceberg resolve names "
                       "ignoring case), or its dotted form equals another column's path (a top-level "
                       "'a.b' beside 'b' inside 'a')",
    "reserved_field": f"top-level names starting with {', '.join(RESERVED_PREFIXES)} are icetide's",
    "name_collision": "target.field_names: sanitize gave another field's name this column already (e.g. a "
                      "literal 'user_x2Dagent' beside 'user-agent'); rename one of them at the producer",
}


def rejected_message(evo: Evolution, max_columns: int) -> Column:
    parts = []
    for cls in dict.fromkeys(c for _, c in evo.rejected):
        names = ", ".join([p.name[:64] for p, c in evo.rejected if c == cls][:5])
        why = _WHY.get(cls, f"at most target.max_columns={max_columns} fields")
        parts.append(f"{names} ({why})")
    return F.lit("fields not added to the table: " + "; ".join(parts))
