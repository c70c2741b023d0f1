"""Schema references and top-level unions of records (#40 item 8): a registry schema made into the
self-contained record schemas ``from_avro`` decodes with. Pure but for the registry requests.

**References.** A registry schema may name a type registered in another subject (Confluent's
``references``: ``{"name": "com.acme.Address", "subject": "address", "version": 1}``), as a
producer's serializer parses it: the referenced schemas first (their own references too), then the
schema, every named type they define known by its full name. :func:`referenced` fetches them
(``/subjects/<subject>/versions/<version>``, once each, at most :data:`MAX_REFERENCES`);
:func:`inlined` writes each named type out where the schema first uses it (with its namespace made
explicit, so it means the same wherever it lands), as Avro's own ``Schema.toString`` would.

**Top-level unions.** Confluent's way to put several event types on one topic is a schema that is
a union of records (usually of references: ``["com.acme.Order", "com.acme.Refund"]``). A record of
such a schema is the member's record after the member's index (a zigzag varint: ``2k`` in one byte
for the first 64 members). :func:`members` gives each member as a record schema of its own (the
named types it borrows from other members written out), so each member is decoded, typed and routed
as a record of its own (:mod:`.avro`: one id per member).

Every refusal is :class:`~.avro_types.UnsupportedSchema` with the reason: the schema's records are
dead letters, the run goes on. A registry that does not answer is waited out (the client's outage
handling), never a refusal.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from icetide.ingest.formats.avro_types import PRIMITIVES, UnsupportedSchema, full_name
from icetide.ingest.formats.registry import RegistryClient, SchemaRefused

#: At most this many schemas referenced by one schema (references of references included)
MAX_REFERENCES = 100
#: At most this many members in a top-level union (a member's index is then one byte of the payload)
MAX_MEMBERS = 64
NAMED = ("record", "error", "enum", "fixed")


def resolved(client: RegistryClient, sid: int, text: str, references: list[Any]) -> tuple[list[Any], bool]:
    """The schemas schema ``sid``'s records are decoded with, its references written out: the schema
    itself, or each member of a top-level union (:func:`members`); and whether it was such a union."""
    try:
        schema = json.loads(text)
    except ValueError as e:
        raise UnsupportedSchema(f"schema id {sid} is not valid JSON: {e}") from None
    named = referenced(client, sid, references) if references else {}
    if isinstance(schema, list):
        return members(sid, schema, named), True
    try:
        return [inlined(schema, named) if named else schema], False
    except RecursionError:
        raise UnsupportedSchema(f"schema id {sid} nests too deep") from None


def referenced(client: RegistryClient, sid: int, references: list[Any]) -> dict[str, Any]:
    """Every named type the schemas ``references`` name define, by full name (their references too)."""
    out: dict[str, Any] = {}
    seen: set[tuple[str, str]] = set()
    todo = list(references)
    while todo:
        ref = todo.pop(0)
        if not isinstance(ref, dict) or not ref.get("subject") or ref.get("version") is None:
            raise UnsupportedSchema(f"schema id {sid} has a reference without a subject and version: {str(ref)[:120]}")
        subject, version = str(ref["subject"]), str(ref["version"])
        if (subject, version) in seen:
            continue
        seen.add((subject, version))
        if len(seen) > MAX_REFERENCES:
            raise UnsupportedSchema(f"schema id {sid} references more than {MAX_REFERENCES} schemas")
        where = f"subject {subject[:120]!r} version {version[:20]}"
        try:
            # a version soft-deleted since is still what old records were written with (as Confluent's
            # serializers look it up: lookupDeletedSchema)
            got = client.get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/"
                             f"{urllib.parse.quote(version, safe='')}?deleted=true", scoped=True)  # 401/403: refused
        except KeyError:
            raise UnsupportedSchema(f"schema id {sid} references {where}, which the registry does not have "
                                    "(HTTP 404)") from None
        except SchemaRefused as e:
            raise UnsupportedSchema(f"schema id {sid} references {where}: {e}") from None
        if not isinstance(got, dict) or got.get("schemaType", "AVRO") != "AVRO":
            raise UnsupportedSchema(f"schema id {sid} references {where}, which is not an Avro schema")
        try:
            schema = json.loads(str(got.get("schema", "")))
        except ValueError:
            raise UnsupportedSchema(f"schema id {sid} references {where}, which is not valid JSON") from None
        try:
            found = definitions(schema, "", {})
        except RecursionError:
            raise UnsupportedSchema(f"schema id {sid} references {where}, which nests too deep") from None
        out.update({k: v for k, v in found.items() if k not in out})
        if isinstance(schema, dict) and ref.get("name") and schema.get("type") in NAMED:
            out.setdefault(str(ref["name"]), found[full_name(schema, "")])
        todo.extend(got.get("references") or [])
    return out


def definitions(s: Any, ns: str, out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with every named type ``s`` defines, by full name, each with its namespace explicit."""
    if isinstance(s, list):
        for m in s:
            definitions(m, ns, out)
    elif isinstance(s, dict):
        t = s.get("type")
        if t in NAMED:
            name = full_name(s, ns)
            out.setdefault(name, explicit(s, name))
            inner = name.rsplit(".", 1)[0] if "." in name else ""
            for f in s.get("fields", []) if t in ("record", "error") else []:
                if isinstance(f, dict):
                    definitions(f.get("type"), inner, out)
        elif t == "array":
            definitions(s.get("items"), ns, out)
        elif t == "map":
            definitions(s.get("values"), ns, out)
        elif isinstance(t, dict | list):
            definitions(t, ns, out)
    return out


def explicit(s: dict[str, Any], name: str) -> dict[str, Any]:
    """A named type written so that it has full name ``name`` wherever it lands."""
    space, _, simple = name.rpartition(".")
    return {**s, "name": simple, "namespace": space}


def inlined(schema: Any, named: dict[str, Any]) -> Any:
    """``schema`` with each type it names from ``named`` (full name → definition) written out where
    it is first used; later uses, and a second definition of a name already written, stay names."""
    return _inline(schema, "", named, set())


def _inline(s: Any, ns: str, named: dict[str, Any], defined: set[str]) -> Any:
    if isinstance(s, str):
        if s in PRIMITIVES:
            return s
        candidates = (s if "." in s or not ns else f"{ns}.{s}", s)
        if any(c in defined for c in candidates):
            return s
        target = next((named[c] for c in candidates if c in named), None)
        return s if target is None else _inline(target, ns, named, defined)  # undefined: refused when typed
    if isinstance(s, list):
        return [_inline(m, ns, named, defined) for m in s]
    if not isinstance(s, dict):
        return s
    t = s.get("type")
    if t in NAMED:
        name = full_name(s, ns)
        if name in defined:
            return name
        defined.add(name)
        if t not in ("record", "error"):
            return s
        inner = name.rsplit(".", 1)[0] if "." in name else ""
        return {**s, "fields": [{**f, "type": _inline(f.get("type"), inner, named, defined)} if isinstance(f, dict)
                                else f for f in s.get("fields", [])]}
    if t == "array":
        return {**s, "items": _inline(s.get("items"), ns, named, defined)}
    if t == "map":
        return {**s, "values": _inline(s.get("values"), ns, named, defined)}
    if isinstance(t, dict | list) or (isinstance(t, str) and t not in PRIMITIVES):
        return {**s, "type": _inline(t, ns, named, defined)}
    return s


def members(sid: int, union: list[Any], named: dict[str, Any]) -> list[dict[str, Any]]:
    """Each member of a top-level union as a record schema of its own: the named types it takes
    from ``named`` (references) or borrows from other members written out."""
    if not union or len(union) > MAX_MEMBERS:
        raise UnsupportedSchema(f"schema id {sid} is a union of {len(union)} types; a table takes a union of 1 to "
                                f"{MAX_MEMBERS} records")
    try:
        index = {**named, **definitions(union, "", {})}
        out = [_inline(m, "", index, set()) for m in union]
    except RecursionError:
        raise UnsupportedSchema(f"schema id {sid} nests too deep") from None
    for k, m in enumerate(out):
        if not isinstance(m, dict) or m.get("type") not in ("record", "error"):
            raise UnsupportedSchema(f"schema id {sid} is a union whose member {k} ({str(m)[:60]}) is not a record: "
                                    "a top-level union is read as one record type per member")
    return out
