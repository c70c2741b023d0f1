"""Iceberg JDBC catalog; the embedded default is a SQLite file plus a local warehouse folder.

Readable by PyIceberg's SqlCatalog and DuckDB too (same ``iceberg_tables`` schema).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from icetide.catalog.fileio import fileio_properties as _fileio
from icetide.config.catalog import JdbcCatalog
from icetide.errors import ConfigError, UnsupportedByReader

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


def pyiceberg_properties(cfg: JdbcCatalog, resolve: Callable[[str], str]) -> dict[str, str]:
    """PyIceberg ``SqlCatalog`` properties for the same catalog (SQLite only: PyIceberg speaks
    SQLAlchemy, not JDBC; other JDBC databases raise :class:`UnsupportedByReader`)."""
    db = sqlite_path(cfg, resolve)
    if db is None:
        raise UnsupportedByReader(f"catalog.uri: {cfg.uri.split('?')[0].split('//')[0]}… is read with Spark "
                                  "(only jdbc:sqlite: catalogs are read without a JVM)")
    wh = warehouse_location(cfg, resolve)
    return {"type": "sql", "uri": f"sqlite:///{db.resolve()}",
            "warehouse": wh if "://" in wh else Path(wh).resolve().as_uri(), **_fileio(cfg.properties)}


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
