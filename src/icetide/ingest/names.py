"""Field names as producers write them: which a table can hold, and reading a field's value by name.

Invariant: a record's field name is kept as the producer wrote it (``user-agent``, ``service.name``,
``Order Id``, ``2fa``, ``größe``) and never reaches SQL text: columns are addressed through
DataFrame APIs by exact name, JSON values through :func:`field_texts` (``from_json`` with a schema,
never a JSON-path string). Refused are only names no engine can hold (:func:`problem`): empty, with
control characters, or longer than :data:`MAX_LENGTH`; and (in evolution) names equal ignoring case
to another at the same level, or whose dotted form equals another column's path
(:func:`dotted_names`: Iceberg resolves ``a.b`` to a top-level ``a.b`` and to ``b`` inside ``a``
alike).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructField, StructType

if TYPE_CHECKING:
    from pyspark.sql import Column

MAX_LENGTH = 255
#: Top-level field names starting with these (any case) are icetide's: a record never sets them.
RESERVED_PREFIXES = ("_kafka_", "_icetide_", "_cdc_")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: A column whose name ``target.field_names: sanitize`` changed keeps the producer's name in its comment
#: (Iceberg's column doc) after this prefix: what the records are read by.
ORIGINAL = "icetide original name: "


def problem(name: str) -> str | None:
    """Why no engine can hold ``name`` as a column name (None: it can)."""
    if not name:
        return "the name is empty"
    if len(name) > MAX_LENGTH:
        return f"the name is longer than {MAX_LENGTH} characters"
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in name):
        return "the name holds a control character"
    return None


def sanitize(name: str) -> str:
    """``target.field_names: sanitize``: ``name`` as an ASCII identifier ``[A-Za-z_][A-Za-z0-9_]*``,
    the way Iceberg's own ``AvroSchemaUtil.sanitize`` does it: a name that is one already is kept; in
    others every other character becomes ``_x`` and its code point in upper-case hex, and a leading
    digit gets a ``_`` before it (``user-agent`` → ``user_x2Dagent``, ``service.name`` →
    ``service_x2Ename``, ``2fa`` → ``_2fa``, ``größe`` → ``gr_xF6_xDFe``). Two names that map to one
    are the same column name ignoring case to evolution, so the second is refused, never merged."""
    if _IDENTIFIER.fullmatch(name):
        return name
    out = []
    for i, ch in enumerate(name):
        if ch == "_" or (ch.isascii() and ch.isalpha()) or (ch.isascii() and ch.isdigit() and i > 0):
            out.append(ch)
        elif ch.isascii() and ch.isdigit():
            out.append(f"_{ch}")
        else:
            out.append(f"_x{ord(ch):X}")
    return "".join(out)


def original(field: StructField) -> str:
    """The name records give a column: the producer's name a sanitized column keeps in its comment."""
    comment = (field.metadata or {}).get("comment")
    if isinstance(comment, str) and comment.startswith(ORIGINAL):
        return comment[len(ORIGINAL):]
    return field.name


def _rebuild(t: DataType, field: Callable[[StructField, DataType], StructField]) -> DataType:
    """``t`` with every struct field (at any depth, in lists and map values too) replaced by
    ``field(old, its rebuilt type)``."""
    if isinstance(t, StructType):
        return StructType([field(f, _rebuild(f.dataType, field)) for f in t.fields])
    if isinstance(t, ArrayType):
        return ArrayType(_rebuild(t.elementType, field), t.containsNull)
    if isinstance(t, MapType):
        return MapType(t.keyType, _rebuild(t.valueType, field), t.valueContainsNull)
    return t


def sanitized_type(t: DataType) -> DataType:
    """``t`` (an inferred record type) with every struct field name sanitized; a renamed field keeps
    the producer's name in its comment (:data:`ORIGINAL`)."""
    def field(f: StructField, inner: DataType) -> StructField:
        name = sanitize(f.name)
        return StructField(name, inner, f.nullable,
                           {**(f.metadata or {}), "comment": ORIGINAL + f.name} if name != f.name else f.metadata)

    return _rebuild(t, field)


#: Table property holding, under ``field_names: sanitize``, each renamed column's producer name by the
#: column's dotted path (``{"user_x2Dagent": "user-agent", "meta.gr_xF6_xDFe": "größe"}``). Where it
#: exists it is the mapping records are read by (a column comment is documentation a user may
#: edit); tables made before it read the comments.
PROPERTY = "icetide.original-names"


def _paths(t: DataType, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], StructField]]:
    """Every struct field of ``t`` with its dotted path (``element``/``value`` for lists and maps)."""
    out: list[tuple[tuple[str, ...], StructField]] = []
    if isinstance(t, StructType):
        for f in t.fields:
            out.append(((*prefix, f.name), f))
            out += _paths(f.dataType, (*prefix, f.name))
    elif isinstance(t, ArrayType):
        out += _paths(t.elementType, (*prefix, "element"))
    elif isinstance(t, MapType):
        out += _paths(t.valueType, (*prefix, "value"))
    return out


def originals(t: DataType) -> dict[str, str]:
    """The producer names of ``t``'s renamed fields, by dotted path (what :data:`PROPERTY` holds)."""
    return {".".join(p): original(f) for p, f in _paths(t) if original(f) != f.name}


def with_originals(t: StructType, mapping: dict[str, str] | None) -> StructType:
    """``t`` (a table's schema) reading its producer names from ``mapping`` (the table's
    :data:`PROPERTY`) instead of column comments; ``mapping`` None: the comments (older tables)."""
    if mapping is None:
        return t

    def rebuild(u: DataType, prefix: tuple[str, ...]) -> DataType:
        if isinstance(u, StructType):
            fields = []
            for f in u.fields:
                path = (*prefix, f.name)
                meta = dict(f.metadata or {})
                given = mapping.get(".".join(path))
                if given is not None:
                    meta["comment"] = ORIGINAL + given
                elif str(meta.get("comment", "")).startswith(ORIGINAL):
                    meta.pop("comment")  # an edited or copied comment does not rename anything
                fields.append(StructField(f.name, rebuild(f.dataType, path), f.nullable, meta))
            return StructType(fields)
        if isinstance(u, ArrayType):
            return ArrayType(rebuild(u.elementType, (*prefix, "element")), u.containsNull)
        if isinstance(u, MapType):
            return MapType(u.keyType, rebuild(u.valueType, (*prefix, "value")), u.valueContainsNull)
        return u

    out = rebuild(t, ())
    assert isinstance(out, StructType)
    return out


def record_type(t: DataType) -> DataType:
    """A table's type as the records spell it (the producer's names of sanitized columns): what
    ``from_json`` reads them with, before the result is cast back to the table's names."""
    return _rebuild(t, lambda f, inner: StructField(original(f), inner, f.nullable))


def renamed(t: DataType) -> bool:
    """Whether any field of ``t`` is read from records under another name."""
    return record_type(t) != _rebuild(t, lambda f, inner: StructField(f.name, inner, f.nullable))


def dotted_names(prefix: str, t: DataType) -> set[str]:
    """The lower-cased dotted names Iceberg indexes for a field named ``prefix`` of type ``t``: its
    own, every nested field's (``a.b``), and for lists and maps both the long form
    (``a.element.b``, ``m.value.b``) and the short one (``a.b``)."""
    out = {prefix.lower()}
    if isinstance(t, StructType):
        for f in t.fields:
            out |= dotted_names(f"{prefix}.{f.name}", f.dataType)
    elif isinstance(t, ArrayType):
        out |= dotted_names(f"{prefix}.element", t.elementType)
        out |= {n for n in dotted_names(prefix, t.elementType) if n != prefix.lower()}
    elif isinstance(t, MapType):
        out |= dotted_names(f"{prefix}.key", t.keyType) | dotted_names(f"{prefix}.value", t.valueType)
        out |= {n for n in dotted_names(prefix, t.valueType) if n != prefix.lower()}
    return out


def schema_dotted_names(schema: StructType) -> set[str]:
    out: set[str] = set()
    for f in schema.fields:
        out |= dotted_names(f.name, f.dataType)
    return out


def _tree(paths: Iterable[tuple[str, ...]]) -> StructType:
    """A struct of strings with one leaf per path (the paths are prefix-free)."""
    root: dict[str, dict] = {}  # type: ignore[type-arg]
    for p in paths:
        node = root
        for part in p:
            node = node.setdefault(part, {})

    def build(node: dict) -> StructType:  # type: ignore[type-arg]
        return StructType([StructField(k, build(v) if v else StringType(), True) for k, v in node.items()])

    return build(root)


def field_texts(text: Column, paths: list[tuple[str, ...]]) -> dict[tuple[str, ...], Column]:
    """Each path's value in the JSON ``text`` as text (numbers and booleans as written, objects as
    JSON; null when missing, null, or under a non-object), from one ``from_json`` for all of them.
    Names are matched exactly (case included), whatever characters they hold."""
    from pyspark.sql import functions as F

    if not paths:
        return {}
    # each parse reads a prefix-free group of paths (a path that is a prefix of another, rare, is
    # read as its own leaf by a later parse): no value is lost to a parent being a struct
    out: dict[tuple[str, ...], Column] = {}
    left = list(dict.fromkeys(paths))
    while left:
        group = [p for p in left if not any(q != p and q[:len(p)] == p for q in left)]
        parsed = F.from_json(text, _tree(group))
        for p in group:
            c = parsed
            for part in p:
                c = c.getField(part)
            out[p] = c
        left = [p for p in left if p not in group]
    return out
