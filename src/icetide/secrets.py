"""Secrets never leave icetide in clear: known secret values are scrubbed from everything it emits.

Redaction by key name alone misses a password inside a JAAS line, a URI's ``user:password@``, a
webhook URL whose path is the token. So loading a config *registers* every secret value it holds
(:func:`register_config`): ``SecretStr`` fields, values of secret-bearing keys under
``properties``/``options``/``conf`` (:func:`is_secret_key`), passwords in URIs, webhook URLs whole;
and :func:`scrub` replaces each registered value, and any ``user:password@`` it has not seen, with
``***``. Everything icetide prints or writes goes through it: log records (:class:`ScrubFilter` on
the root handlers), ``--output json``, error messages, the HTML report, error texts in its tables.
Spark redacts its own UI and logs by key name (``spark.redaction.regex``, set in
:mod:`icetide.spark.session` to cover every secret-bearing key icetide sets).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

MASK = "***"
#: keys whose values are secret wherever they appear (Kafka, Iceberg, AWS, JDBC, Spark conf)
SECRET_KEY_RE = re.compile(r"(?i)password|passwd|secret|token|credential|jaas|sasl[._]oauthbearer|"
                           r"private[._-]?key|api[._-]?key|session[._-]?key|authorization|"
                           r"ssl[._]key|keystore[._]key|truststore[._]password")
_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")
_MIN_LEN = 4  # shorter "secrets" (e.g. "x") would mask ordinary text; refuse to track them

_lock = threading.Lock()
_known: set[str] = set()


def is_secret_key(key: str) -> bool:
    return bool(SECRET_KEY_RE.search(key))


def register(*values: str | None) -> None:
    """Remember secret values so :func:`scrub` masks them from now on (process-wide)."""
    with _lock:
        for v in values:
            if v and len(v) >= _MIN_LEN:
                _known.add(v)
                # the forms a value takes URL-encoded or inside a JSON string (a quote, a backslash,
                # a control or non-ASCII character is escaped there: `json.dumps` of a result)
                _known.add(urllib.parse.quote(v, safe=""))
                _known.add(json.dumps(v)[1:-1])
                _known.add(json.dumps(v, ensure_ascii=False)[1:-1])


def _token_like(part: str) -> bool:
    """A path segment that may be a token (``T0B1X2...``), not an ordinary word (``hook``, ``alerts``)."""
    return len(part) >= 16 or (len(part) >= 8 and any(c.isdigit() for c in part))


def register_url(url: str | None) -> None:
    """A URL whose path, query or user info may carry a token: the whole URL, its password, its
    query, a path of more than one segment, and each token-like segment. A one-word path
    (``/hook``) is not registered: masking an ordinary word would garble every later log line."""
    if not url:
        return
    parsed = urllib.parse.urlsplit(url)
    register(parsed.password)
    path = parsed.path.strip("/")
    if path or parsed.query:
        register(url, parsed.query, path if "/" in path else None)
        register(*(part for part in path.split("/") if _token_like(part)))


def register_mapping(values: Mapping[str, Any]) -> None:
    """Values of secret-bearing keys, and passwords inside any URI-looking value."""
    for k, v in values.items():
        if not isinstance(v, str):
            continue
        if is_secret_key(k):
            register(v)
            register(*_jaas_passwords(v))
        for m in _USERINFO_RE.finditer(v):
            register(m.group("pw"))


def _jaas_passwords(v: str) -> list[str]:
    return re.findall(r'(?i)(?:password|secret|token)\s*=\s*"([^"]*)"', v)


def scrub(text: str) -> str:
    """``text`` with every registered secret and any ``user:password@`` masked."""
    if not text:
        return text
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for v in known:
        if v in text:
            text = text.replace(v, MASK)
    return _USERINFO_RE.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{MASK}@", text)


def error_line(e: BaseException, limit: int = 1000) -> str:
    """The first line of an error's text, scrubbed and cut to ``limit``: what icetide stores in its
    own tables (the maintenance log) and shows in one-line messages."""
    text = str(e).strip()
    return scrub(text.splitlines()[0] if text else type(e).__name__)[:limit]


def safe_url(url: str | None) -> str:
    """A URL fit for display: scheme and host only when it has a path, query or user info."""
    if not url:
        return ""
    p = urllib.parse.urlsplit(url)
    host = p.hostname or ""
    port = f":{p.port}" if p.port else ""
    tail = "/***" if (p.path.strip("/") or p.query or p.password) else ""
    return f"{p.scheme}://{host}{port}{tail}"


def redact_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy fit for display: secret-bearing keys masked, other strings scrubbed."""
    return {k: (MASK if is_secret_key(k) and v else scrub(v) if isinstance(v, str) else v) for k, v in values.items()}


def register_config(cfg: Any) -> None:
    """Every secret a :class:`~icetide.config.models.PipelineConfig` holds (walked generically)."""
    from pydantic import BaseModel, SecretStr

    if isinstance(cfg, SecretStr):
        register(cfg.get_secret_value())
    elif isinstance(cfg, BaseModel):
        for name in type(cfg).model_fields:
            value = getattr(cfg, name)
            if isinstance(value, str) and name == "webhook_url":
                register_url(value)
            elif isinstance(value, str):
                register_mapping({name: value})
            else:
                register_config(value)
    elif isinstance(cfg, Mapping):
        register_mapping(cfg)
    elif isinstance(cfg, list | tuple):
        for v in cfg:
            register_config(v)


def register_environment(env: Mapping[str, str]) -> None:
    """Secret-looking environment variables (``AWS_SECRET_ACCESS_KEY``, ``*_PASSWORD``, ``*_TOKEN``)."""
    register_mapping({k: v for k, v in env.items() if is_secret_key(k.replace("_", "."))})


class ScrubFilter(logging.Filter):
    """Masks registered secrets in a log record's final message (arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = scrub(message)
        if record.exc_info and record.exc_info[1] is not None:
            clean_exc = scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
            record.exc_text = clean_exc
        if clean != message or record.args:
            record.msg, record.args = clean, None
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Attach :class:`ScrubFilter` to every handler of ``logger`` (default: the root logger)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, ScrubFilter) for f in handler.filters):
            handler.addFilter(ScrubFilter())


def forget_all() -> None:
    """For tests: drop every registered value."""
    with _lock:
        _known.clear()
