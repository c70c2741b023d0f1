"""Load a pipeline config: YAML file → ``${VAR}`` interpolation → env overrides → validation.

Env overrides: ``ICETIDE__SECTION__KEY=value`` sets ``section.key`` (``__`` separates levels),
e.g. ``ICETIDE__SOURCE__BOOTSTRAP_SERVERS=broker:9092``. Values are parsed as YAML scalars, so
``ICETIDE__SOURCE__MAX_OFFSETS_PER_TRIGGER=5000`` is an integer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from icetide import secrets
from icetide.config.base import KEY_MARK
from icetide.config.models import PipelineConfig
from icetide.errors import ConfigError

ENV_PREFIX = "ICETIDE__"
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> PipelineConfig:
    """Read, interpolate, override and validate; raise :class:`ConfigError` naming the key."""
    env = os.environ if env is None else env
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found (pass the path with -c/--config)")
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}:{where} is not valid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections (name, source, ...)")
    raw = _interpolate(raw, env, str(p))
    _apply_env_overrides(raw, env)
    raw.setdefault("base_dir", str(p.resolve().parent))
    secrets.register_environment(env)
    cfg = validate_config(raw, source=str(p))
    secrets.register_config(cfg)
    return cfg


def validate_config(raw: dict[str, Any], source: str = "config") -> PipelineConfig:
    try:
        return PipelineConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError("\n".join(format_errors(e, source, PipelineConfig))) from None


def format_errors(err: ValidationError, source: str, model: type[BaseModel]) -> list[str]:
    """One line per problem: ``<file>: <dotted.key>: <what is wrong and what to do>``."""
    lines = []
    for e in err.errors():
        loc = [str(x) for x in e["loc"] if not _is_union_tag(x)]
        key = ".".join(loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
            lines.append(f"{source}: unknown key '{key}'{hint}")
        elif e["type"] == "missing":
            lines.append(f"{source}: {key}: required key is missing")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            if msg.startswith(KEY_MARK):  # a model's check that names one of its keys (config.base.keyed)
                sub, _, msg = msg[len(KEY_MARK):].partition(": ")
                key = f"{key}.{sub}" if loc else sub
            got = e.get("input")
            shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
            if secrets.is_secret_key(key) or "url" in key.lower() or "uri" in key.lower():
                shown = ""
            lines.append(f"{source}: {key}: {msg}{shown}")
    return lines


def _is_union_tag(x: object) -> bool:
    return isinstance(x, str) and x in ("jdbc", "rest")


def _allowed_keys(model: type[BaseModel], path: list[str]) -> list[str]:
    current: Any = model
    for part in path:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", None)
        current = next((a for a in (args or [ann]) if hasattr(a, "model_fields")), None)
        if current is None:
            return []
    fields = getattr(current, "model_fields", {})
    return sorted(f.alias or n for n, f in fields.items() if n != "base_dir")


def _interpolate(value: Any, env: Mapping[str, str], source: str) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, env, source) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env, source) for v in value]
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(
                f"{source}: environment variable {name} is not set (used as ${{{name}}}); "
                f"export it or write ${{{name}:-default}}"
            )

        return _VAR_RE.sub(sub, value)
    return value


def _apply_env_overrides(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    for name, value in sorted(env.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX):].split("__") if p]
        if not path:
            continue
        node = raw
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        try:
            node[path[-1]] = yaml.safe_load(value)
        except yaml.YAMLError:
            node[path[-1]] = value
