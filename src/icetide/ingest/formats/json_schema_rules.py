"""JSON Schema validation rules as plain data, and their wording in dead letters. Pure: no JVM.

A rule is one keyword of a registry schema at one path of the record (:mod:`.json_schema_types`
derives them with the column types); :mod:`.json_schema_checks` turns a schema's rules into the
per-record check. A record breaking one is a ``schema_violation`` dead letter whose message names
the JSON path and what is wrong: ``$.address.zip: does not match pattern ^[0-9]{5}$``.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any, NamedTuple

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Each(enum.Enum):
    """A path step into every element of an array (``ITEM``) or every value of a map (``VALUE``)."""

    ITEM = "[*]"
    VALUE = ".*"


#: Where a rule applies: property names from the record's top level, and :class:`Each` steps
Path = tuple[str | Each, ...]


class Rule(NamedTuple):
    """One check of a value: at ``path``, ``keyword`` with its argument (``type``: the allowed JSON
    types; ``required``: one property name, the rule's path is its object's; ``additionalProperties``:
    the declared names)."""

    path: Path
    keyword: str
    arg: Any


def json_path(path: Path) -> str:
    """``path`` as a JSON path: ``$.address.zip``, ``$.tags[*]``, ``$['user-agent']``, ``$.attrs.*``."""
    out = "$"
    for step in path:
        if isinstance(step, Each):
            out += step.value
        else:
            out += step_text(step)
    return out


def step_text(name: str) -> str:
    """One property step of a JSON path (``.name``, or ``['odd name']`` when not an identifier)."""
    if _IDENT.fullmatch(name):
        return "." + name
    return "['" + name.replace("\\", "\\\\").replace("'", "\\'") + "']"


def where(rule: Rule) -> Path:
    """The path a broken ``rule`` names: its own, or for ``required`` the missing property's."""
    return (*rule.path, rule.arg) if rule.keyword == "required" else rule.path


def message(rule: Rule, null: bool = False) -> str:
    """What a value breaking ``rule`` does wrong (:func:`where` names the path before it); ``null``:
    for a ``type`` rule, the value is a null the type does not allow."""
    k, a = rule.keyword, rule.arg
    if k == "type":
        kinds = " or ".join(t for t in a if t != "null") or "null"
        return f"is null, which type {kinds} does not allow" if null else f"is not of type {kinds}"
    if k == "enum":
        return f"is not one of {_values(a)}"[:300]
    if k in ("const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        a = value_text(a)
    words = {
        "required": "is required but missing",
        "const": f"is not {a}",
        "minimum": f"is less than the minimum {a}",
        "maximum": f"is greater than the maximum {a}",
        "exclusiveMinimum": f"is not greater than {a} (exclusiveMinimum)",
        "exclusiveMaximum": f"is not less than {a} (exclusiveMaximum)",
        "multipleOf": f"is not a multiple of {a}",
        "minLength": f"is shorter than {a} characters",
        "maxLength": f"is longer than {a} characters",
        "pattern": f"does not match pattern {a}",
        "minItems": f"has fewer than {a} items",
        "maxItems": f"has more than {a} items",
        "uniqueItems": "has duplicate items (uniqueItems)",
        "minProperties": f"has fewer than {a} properties",
        "maxProperties": f"has more than {a} properties",
        "additionalProperties": "has a property the schema does not declare (additionalProperties: false)",
    }
    return words.get(k, f"does not keep {k}")[:300]


def value_text(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)[:80]


def _values(vs: tuple[Any, ...]) -> str:
    shown = ", ".join(value_text(v) for v in vs[:5])
    return f"[{shown}, … {len(vs)} values]" if len(vs) > 5 else f"[{shown}]"
