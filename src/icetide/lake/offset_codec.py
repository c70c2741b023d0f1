"""How the ledger's offset maps are written: JSON keyed by topic then partition, and long values
deflated (see :mod:`icetide.lake.offsets`)."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

TopicPartition = tuple[str, int]

__all__ = ["PACK_OVER", "decode_map", "encode_map", "pack", "safe_value", "unpack"]

_SAFE_PROPERTY_VALUE = frozenset('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-{}[]:," ')


def encode_map(d: dict[TopicPartition, Any]) -> str:
    out: dict[str, dict[str, Any]] = {}
    for (topic, part), v in sorted(d.items()):
        out.setdefault(topic, {})[str(part)] = list(v) if isinstance(v, tuple) else v
    return json.dumps(out, separators=(",", ":"), sort_keys=True)


#: Summary values longer than this are deflated (many partitions per batch).
PACK_OVER = 1024
_PACKED = "z1:"


def pack(text: str) -> str:
    """``text``, deflated and base64url-encoded (no padding) behind ``z1:`` when longer than PACK_OVER."""
    if len(text) <= PACK_OVER:
        return text
    return _PACKED + base64.urlsafe_b64encode(zlib.compress(text.encode(), 9)).decode().rstrip("=")


def unpack(text: str) -> str:
    if not text.startswith(_PACKED):
        return text
    body = text[len(_PACKED):]
    return zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))).decode()


def decode_map(text: str | None) -> dict[TopicPartition, Any]:
    if not text:
        return {}
    raw = json.loads(unpack(text))
    return {(t, int(p)): (tuple(v) if isinstance(v, list) else v) for t, ps in raw.items() for p, v in ps.items()}


def safe_value(value: str) -> str:
    """``value`` if it is made only of a narrow alphabet (property values are written into SQL)."""
    if not set(value) <= _SAFE_PROPERTY_VALUE:
        raise ValueError(f"refusing to write an unexpected watermark value: {value[:200]}")
    return value
