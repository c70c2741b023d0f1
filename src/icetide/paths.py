"""Where icetide keeps local state: fetched jars, logs, the dev services' data, the demo's warehouse.

One folder per user, so every command works from any folder once ``icetide setup`` has run:
``$ICETIDE_HOME`` if set, else ``$XDG_CACHE_HOME/icetide``, else ``~/.cache/icetide``.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The per-user state folder (not created here)."""
    explicit = os.environ.get("ICETIDE_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(cache).expanduser() / "icetide").resolve()
