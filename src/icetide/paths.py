"""Where icetide keeps local state: fetched jars, the dev Kafka broker, the demo's warehouse."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """``$ICETIDE_HOME`` if set, else ``./.icetide`` in the current folder."""
    return Path(os.environ.get("ICETIDE_HOME") or Path.cwd() / ".icetide").resolve()
