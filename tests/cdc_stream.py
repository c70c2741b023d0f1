"""A generated change stream and its expected final state, computed independently of icetide."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChangeStream:
    """Messages in delivery order (with duplicates, out-of-order and replayed old changes)."""

    messages: list[tuple[int, bytes]] = field(default_factory=list)  # (key, value)
    final: dict[int, tuple[str, float]] = field(default_factory=dict)  # key → (name, balance)
    bad: dict[str, int] = field(default_factory=dict)  # dead-letter class → count
    changes: int = 0


def generate(keys: int, changes: int, seed: int, debezium: bool, bad_every: int = 0) -> ChangeStream:
    rng = random.Random(seed)
    out = ChangeStream()
    alive: dict[int, bool] = {}
    history: list[dict[str, Any]] = []
    first = list(range(keys))
    rng.shuffle(first)  # every key is created once, then changes hit random keys
    for version in range(1, changes + 1):
        k = first[version - 1] if version <= keys else rng.randrange(keys)
        op = "c" if not alive.get(k) else "d" if rng.random() < 0.15 else "u"
        row = {"id": k, "name": f"n{k}-{version}", "balance": round(rng.uniform(-1e4, 1e4), 2)}
        history.append({"key": k, "op": op, "version": version, "row": row})
        alive[k] = op != "d"
    # expected final state: the highest version per key wins; a delete removes the row
    newest: dict[int, dict[str, Any]] = {}
    for ch in history:
        if ch["version"] > newest.get(ch["key"], {"version": -1})["version"]:
            newest[ch["key"]] = ch
    out.final = {k: (ch["row"]["name"], ch["row"]["balance"]) for k, ch in newest.items() if ch["op"] != "d"}
    # delivery: shuffled within windows, 3% duplicated, 2% old changes replayed later
    order = list(history)
    for i in range(0, len(order), 500):
        window = order[i:i + 500]
        rng.shuffle(window)
        order[i:i + 500] = window
    delivered: list[dict[str, Any]] = []
    for ch in order:
        delivered.append(ch)
        if rng.random() < 0.03:
            delivered.append(ch)
        if rng.random() < 0.02 and len(delivered) > 1000:
            delivered.append(rng.choice(delivered[: len(delivered) - 1000]))
    out.changes = len(delivered)
    for i, ch in enumerate(delivered):
        out.messages.append((ch["key"], encode(ch, debezium)))
        if bad_every and i % bad_every == 0:
            kind = ("missing_key", "unknown_operation")[(i // bad_every) % 2]
            bad = dict(ch, op="x") if kind == "unknown_operation" else dict(ch, row={"name": "no key"})
            out.messages.append((ch["key"], encode(bad, debezium)))
            out.bad[kind] = out.bad.get(kind, 0) + 1
    return out


def encode(ch: dict[str, Any], debezium: bool) -> bytes:
    if not debezium:
        op = {"c": "insert", "u": "update", "d": "delete"}.get(ch["op"], ch["op"])
        return json.dumps({**ch["row"], "op": op, "version": ch["version"]}, separators=(",", ":")).encode()
    env = {"before": ch["row"] if ch["op"] in ("u", "d") else None,
           "after": None if ch["op"] == "d" else ch["row"], "op": ch["op"], "ts_ms": 1795600000000 + ch["version"],
           "source": {"lsn": ch["version"], "table": "customers", "db": "shop"}}
    if ch["version"] % 2:  # half of them with schemas.enable=true
        env = {"schema": {"type": "struct", "optional": False}, "payload": env}
    return json.dumps(env, separators=(",", ":")).encode()
