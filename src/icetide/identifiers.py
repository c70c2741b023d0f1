"""Validation of every identifier that reaches SQL text, a path or a catalog.

Identifiers come from config and, for routing, from records. Nothing outside the allowed
alphabet is ever quoted or escaped into SQL: it is rejected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from icetide.errors import IdentifierError

#: One part of a table identifier: lower-case ASCII letters, digits and underscores, starting with
#: a letter or underscore. Kept deliberately narrower than Iceberg allows so that the same name is
#: valid unquoted in Spark SQL, Trino, DuckDB and on every object store.
NAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,127}$")
#: Pipeline names end up in snapshot-summary and table-property keys.
PIPELINE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
#: Kafka's own topic alphabet (see Kafka's Topic.validate).
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

SQL_RESERVED = frozenset(
    {
        "select", "from", "where", "table", "drop", "insert", "update", "delete", "merge",
        "create", "alter", "grant", "revoke", "union", "join", "on", "as", "and", "or", "not",
        "null", "true", "false", "into", "values", "set", "order", "group", "by", "having",
    }
)


def validate_name(part: str, what: str = "name") -> str:
    """Return ``part`` if it is a safe identifier part, else raise :class:`IdentifierError`."""
    if not isinstance(part, str) or not NAME_RE.fullmatch(part):
        shown = part if isinstance(part, str) and len(part) <= 64 else f"{str(part)[:64]}…"
        raise IdentifierError(
            f"{what} {shown!r} is not allowed: use 1-128 characters of a-z, 0-9 and _, "
            "starting with a letter or _"
        )
    if part in SQL_RESERVED:
        raise IdentifierError(f"{what} {part!r} is a reserved SQL word; choose another name")
    return part


def validate_table(identifier: str, what: str = "table") -> tuple[str, str]:
    """Split ``namespace.table`` into validated parts (exactly one namespace level)."""
    if not isinstance(identifier, str):
        raise IdentifierError(f"{what} must be a string like 'namespace.table'")
    parts = identifier.split(".")
    if len(parts) != 2:
        raise IdentifierError(
            f"{what} {identifier[:64]!r} must have the form 'namespace.table' "
            "(one namespace, one table name)"
        )
    return validate_name(parts[0], f"{what} namespace"), validate_name(parts[1], f"{what} name")


def validate_pipeline(name: str) -> str:
    if not isinstance(name, str) or not PIPELINE_RE.fullmatch(name):
        raise IdentifierError(
            f"pipeline name {str(name)[:64]!r} is not allowed: use 1-63 characters of a-z, 0-9, "
            "_ and -, starting with a letter or digit"
        )
    return name


def validate_topic(topic: str) -> str:
    if not isinstance(topic, str) or not TOPIC_RE.fullmatch(topic):
        raise IdentifierError(
            f"Kafka topic {str(topic)[:64]!r} is not a valid topic name "
            "(1-249 characters of A-Z, a-z, 0-9, '.', '_' and '-')"
        )
    return topic


def qualified(catalog: str, namespace: str, table: str) -> str:
    """A fully qualified, already-validated identifier for SQL text."""
    return ".".join(validate_name(p) for p in (catalog, namespace, table))


@dataclass(frozen=True, order=True)
class TableRef:
    """A table: catalog, namespace and name, each validated. One parse, one render:
    ``short`` is ``namespace.table`` (config, logs, the action log), ``qualified`` is
    ``catalog.namespace.table`` (SQL text and Spark APIs)."""

    catalog: str
    namespace: str
    name: str

    def __post_init__(self) -> None:
        validate_name(self.catalog, "catalog")
        validate_name(self.namespace, "table namespace")
        validate_name(self.name, "table name")

    @classmethod
    def parse(cls, text: str, catalog: str) -> TableRef:
        """``namespace.table`` in ``catalog``, or ``catalog.namespace.table`` of that same catalog."""
        parts = text.split(".") if isinstance(text, str) else []
        if len(parts) == 3:
            if parts[0] != catalog:
                raise IdentifierError(f"table {text[:64]!r} is not in catalog {catalog!r}")
            parts = parts[1:]
        ns, name = validate_table(".".join(parts))
        return cls(catalog, ns, name)

    @property
    def short(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def qualified(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.name}"

    def __str__(self) -> str:
        return self.qualified
