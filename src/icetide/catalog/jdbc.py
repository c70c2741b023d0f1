"""Iceberg JDBC catalog; the embedded default is a SQLite file plus a local warehouse folder.

Readable by PyIceberg's SqlCatalog and DuckDB too (same ``iceberg_tables`` schema).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from icetide.config.catalog import JdbcCatalog
from icetide.errors import ConfigError

SQLITE = "jdbc:sqlite:"


def sqlite_path(cfg: JdbcCatalog, resolve: Callable[[str], str]) -> Path | None:
    if not cfg.uri.startswith(SQLITE):
        return None
    return Path(resolve(cfg.uri[len(SQLITE):]))


def warehouse_location(cfg: JdbcCatalog, resolve: Callable[[str], str]) -> str:
    return resolve(cfg.warehouse)


def catalog_properties(cfg: JdbcCatalog, resolve: Callable[[str], str]) -> dict[str, str]:
    db = sqlite_path(cfg, resolve)
    props = {
        "type": "jdbc",
        "uri": f"{SQLITE}{db}" if db is not None else cfg.uri,
        "warehouse": warehouse_location(cfg, resolve),
        "jdbc.schema-version": "V1",
    }
    if cfg.user:
        props["jdbc.user"] = cfg.user
    if cfg.password:
        props["jdbc.password"] = cfg.password.get_secret_value()
    props.update(cfg.properties)
    return props


def check(cfg: JdbcCatalog, resolve: Callable[[str], str]) -> None:
    db = sqlite_path(cfg, resolve)
    if db is not None:
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"catalog.uri: cannot create the folder of {db}: {e.strerror}") from None
        if not os.access(db.parent, os.W_OK):
            raise ConfigError(f"catalog.uri: folder {db.parent} is not writable")
    wh = warehouse_location(cfg, resolve)
    if "://" not in wh:
        try:
            Path(wh).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"catalog.warehouse: cannot create {wh}: {e.strerror}") from None
