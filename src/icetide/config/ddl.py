"""Spark DDL table schemas (``target.schema``) parsed without a JVM, so ``icetide check`` can refuse a
typo before Spark starts and check partition, sort and key columns against the schema.

The grammar is Spark's table schema: ``name [:] type [NOT NULL] [COMMENT 'text']`` separated by
commas, with ``STRUCT<…>``, ``ARRAY<…>`` and ``MAP<…, …>`` nesting and backquoted names. It accepts
every type Iceberg can store; Spark types Iceberg has no equivalent for (intervals, ``VOID``) are
refused here rather than by the catalog after the stream has started. Invariant: a schema this
module accepts, Spark's ``_parse_datatype_string`` accepts too (tests/unit/test_ddl.py).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

#: Spark's type names (and aliases) → the kind used by the checks here.
_PRIMITIVES: dict[str, str] = {
    "boolean": "boolean", "tinyint": "int", "byte": "int", "smallint": "int", "short": "int",
    "int": "int", "integer": "int", "bigint": "long", "long": "long", "float": "float", "real": "float",
    "double": "double", "date": "date", "timestamp": "timestamp", "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz", "string": "string", "binary": "binary", "variant": "variant",
}
_SIZED = {"decimal": "decimal", "dec": "decimal", "numeric": "decimal", "char": "string",
          "character": "string", "varchar": "string", "time": "time"}
_NESTED = ("struct", "array", "map")
_UNSUPPORTED = {"interval": "Iceberg has no interval type; store a duration as BIGINT (e.g. milliseconds)",
                "void": "Iceberg has no null type; give the column the type its values will have"}
ALL_TYPES = sorted({*(t.upper() for t in _PRIMITIVES), "DECIMAL(p,s)", "VARCHAR(n)", "CHAR(n)",
                    "STRUCT<…>", "ARRAY<…>", "MAP<…,…>"})

_TOKEN = re.compile(r"\s*(?:(?P<bq>`(?:[^`]|``)*`)|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
                    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<num>\d+)|(?P<sym>[<>(),:]))")


class DdlError(ValueError):
    """A schema Spark would not parse, or a type Iceberg cannot store; the message quotes where."""


@dataclass(frozen=True)
class DdlType:
    kind: str  # a value of _PRIMITIVES, "decimal", "time", or struct / array / map
    fields: tuple[Column, ...] = ()  # struct
    items: tuple[DdlType, ...] = ()  # array: (element,), map: (key, value)


@dataclass(frozen=True)
class Column:
    name: str
    type: DdlType
    nullable: bool = True
    comment: str | None = field(default=None, compare=False)


@dataclass
class _Tok:
    kind: str
    text: str
    pos: int


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup is None:
            start = len(text) - len(text[pos:].lstrip())
            raise DdlError(f"unexpected {text[start]!r} at position {start + 1} ({_near(text, start)})")
        out.append(_Tok(m.lastgroup, m.group(m.lastgroup), m.start(m.lastgroup)))
        pos = m.end()
    out.append(_Tok("end", "", len(text)))
    return out


def _near(text: str, pos: int) -> str:
    start = max(0, pos - 20)
    return "near " + repr(("…" if start else "") + text[start:pos + 20] + ("…" if pos + 20 < len(text) else ""))


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def fail(self, what: str, tok: _Tok | None = None) -> DdlError:
        t = tok or self.tok
        found = "the end" if t.kind == "end" else repr(t.text)
        return DdlError(f"{what}, found {found} at position {t.pos + 1} ({_near(self.text, t.pos)})")

    def take(self, sym: str) -> bool:
        if self.tok.kind == "sym" and self.tok.text == sym:
            self.i += 1
            return True
        return False

    def expect(self, sym: str, what: str) -> None:
        if not self.take(sym):
            raise self.fail(f"expected {what}")

    def word(self, *words: str) -> bool:
        if self.tok.kind == "word" and self.tok.text.lower() in words:
            self.i += 1
            return True
        return False

    def name(self) -> str:
        t = self.tok
        if t.kind == "word":
            self.i += 1
            return t.text
        if t.kind == "bq":
            self.i += 1
            return t.text[1:-1].replace("``", "`")
        raise self.fail("expected a column name")

    def number(self) -> int:
        t = self.tok
        if t.kind != "num":
            raise self.fail("expected a number")
        self.i += 1
        return int(t.text)

    def columns(self, end: str | None) -> tuple[Column, ...]:
        cols: list[Column] = []
        if end is not None and self.take(end):
            return ()
        while True:
            cols.append(self.column())
            if self.take(","):
                continue
            if end is None:
                if self.tok.kind != "end":
                    raise self.fail("expected ',' or the end of the schema")
            else:
                self.expect(end, f"',' or '{end}'")
            break
        seen: dict[str, str] = {}
        for c in cols:
            if c.name.lower() in seen:
                raise DdlError(f"column {c.name!r} is given twice (Spark compares names without case)")
            seen[c.name.lower()] = c.name
        return tuple(cols)

    def column(self) -> Column:
        name = self.name()
        self.take(":")
        dt = self.type()
        nullable, comment = True, None
        while self.tok.kind == "word":
            if self.word("not"):
                if not self.word("null"):
                    raise self.fail("expected NULL after NOT")
                nullable = False
            elif self.word("comment"):
                if self.tok.kind != "str":
                    raise self.fail("expected a quoted comment")
                comment = self.tok.text[1:-1]
                self.i += 1
            else:
                break
        return Column(name, dt, nullable, comment)

    def type(self) -> DdlType:
        t = self.tok
        if t.kind != "word":
            raise self.fail("expected a type")
        lower = t.text.lower()
        if lower in _UNSUPPORTED:
            raise DdlError(f"type {t.text.upper()} at position {t.pos + 1}: {_UNSUPPORTED[lower]}")
        self.i += 1
        if lower in _PRIMITIVES:
            return DdlType(_PRIMITIVES[lower])
        if lower in _SIZED:
            if self.take("("):
                self.number()
                if self.take(","):
                    self.number()
                self.expect(")", "')'")
            return DdlType(_SIZED[lower])
        if lower == "array":
            self.expect("<", "'<' after ARRAY")
            element = self.type()
            self.expect(">", "'>'")
            return DdlType("array", items=(element,))
        if lower == "map":
            self.expect("<", "'<' after MAP")
            key = self.type()
            self.expect(",", "',' between the MAP's key and value types")
            value = self.type()
            self.expect(">", "'>'")
            return DdlType("map", items=(key, value))
        if lower == "struct":
            self.expect("<", "'<' after STRUCT")
            return DdlType("struct", fields=self.columns(">"))
        close = difflib.get_close_matches(lower, [*_PRIMITIVES, *_SIZED, *_NESTED], n=1)
        hint = f"did you mean {close[0].upper()}?" if close else f"types: {', '.join(ALL_TYPES)}"
        raise DdlError(f"unknown type {t.text!r} at position {t.pos + 1} ({_near(self.text, t.pos)}); {hint}")


def parse_schema(text: str) -> tuple[Column, ...]:
    """The columns of a Spark DDL table schema; :class:`DdlError` saying what and where when it is not one."""
    if not text.strip():
        raise DdlError("the schema is empty; list columns like 'id STRING, ts TIMESTAMP'")
    p = _Parser(text)
    if p.tok.kind == "word" and p.tok.text.lower() == "struct" and p.toks[1].text == "<":
        p.i += 2  # 'struct<a: int, …>' is accepted by Spark too
        cols = p.columns(">")
        if p.tok.kind != "end":
            raise p.fail("expected the end of the schema after 'struct<…>'")
        return cols
    return p.columns(None)


#: The column types each partition transform takes (Iceberg's spec, "Partition Transforms").
TRANSFORM_KINDS: dict[str, set[str]] = {
    "years": {"date", "timestamp", "timestamp_ntz"},
    "months": {"date", "timestamp", "timestamp_ntz"},
    "days": {"date", "timestamp", "timestamp_ntz"},
    "hours": {"timestamp", "timestamp_ntz"},
    "bucket": {"int", "long", "decimal", "date", "time", "timestamp", "timestamp_ntz", "string", "binary"},
    "truncate": {"int", "long", "decimal", "string", "binary"},
    "identity": {"boolean", "int", "long", "float", "double", "decimal", "date", "time", "timestamp",
                 "timestamp_ntz", "string", "binary"},
}


def describe(t: DdlType) -> str:
    return {"timestamp": "TIMESTAMP", "timestamp_ntz": "TIMESTAMP_NTZ"}.get(t.kind, t.kind.upper())


def suggest(name: str, names: list[str]) -> str:
    """`` (did you mean 'x'?)`` for a near miss among ``names``, else ``''``."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: The columns icetide adds to every table when ``target.kafka_metadata_columns`` is on.
KAFKA_METADATA = {"_kafka_topic": DdlType("string"), "_kafka_partition": DdlType("int"),
                  "_kafka_offset": DdlType("long"), "_kafka_timestamp": DdlType("timestamp"),
                  "_kafka_key": DdlType("string")}


def transform_problem(fn: str, column: str, have: dict[str, DdlType], where: str) -> str | None:
    """Why ``fn(column)`` cannot partition a table with columns ``have`` (None: it can)."""
    if column not in have:
        return (f"needs column {column!r}, which {where} does not have{suggest(column, list(have))}; fix the "
                "column name or add the column to the schema")
    kind = have[column].kind
    if kind not in TRANSFORM_KINDS[fn]:
        takes = ", ".join(sorted(describe(DdlType(k)) for k in TRANSFORM_KINDS[fn]))
        return (f"cannot take column {column!r} of type {describe(have[column])}: {fn} takes {takes}; "
                "partition by another column or transform")
    return None
