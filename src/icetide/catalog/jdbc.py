"""Iceberg JDBC catalog; the embedded default is a SQLite file plus a local warehouse folder.

Readable by PyIceberg's SqlCatalog and DuckDB too (same ``iceberg_tables`` schema).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from icetide.catalog.fileio import fileio_properties as _fileio
from icetide.config.catalog import JdbcCatalog
from icetide.errors import ConfigError, UnsupportedByReader

SQLITE = "jdbc:sqlite:"
#: What the caller will do with the catalog: ``write`` (run), ``check`` (preflight), ``read`` (the read
#: commands: the catalog must exist).
Purpose = Literal["write", "check", "read"]


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


#: JDBC sub-protocol → (the driver's class file, a Maven coordinate that provides it, the database).
DRIVERS: dict[str, tuple[str, str, str]] = {
    "sqlite": ("org/sqlite/JDBC.class", "org.xerial:sqlite-jdbc", "SQLite"),
    "postgresql": ("org/postgresql/Driver.class", "org.postgresql:postgresql", "PostgreSQL"),
    "mysql": ("com/mysql/cj/jdbc/Driver.class", "com.mysql:mysql-connector-j", "MySQL"),
    "mariadb": ("org/mariadb/jdbc/Driver.class", "org.mariadb.jdbc:mariadb-java-client", "MariaDB"),
    "sqlserver": ("com/microsoft/sqlserver/jdbc/SQLServerDriver.class", "com.microsoft.sqlserver:mssql-jdbc",
                  "SQL Server"),
    "oracle": ("oracle/jdbc/OracleDriver.class", "com.oracle.database.jdbc:ojdbc11", "Oracle"),
}
#: icetide's own folder for the embedded default (``catalog.uri``'s default): ``run`` may create it.
DEFAULT_DIR = ".icetide"


def check(cfg: JdbcCatalog, resolve: Callable[[str], str], purpose: Purpose,
          jars: Callable[[], list[Path]] | None, packages: str = "") -> None:
    """Refuse, naming the key, a catalog that cannot be opened; only ``write`` ever creates a folder
    (icetide's default one), and nothing here creates the catalog itself. ``jars``: the driver's
    classpath (None: not known here, the driver is not looked for)."""
    db = sqlite_path(cfg, resolve)
    if db is None:
        if jars is not None:
            _check_driver(cfg.uri, jars, packages)
    else:
        _check_sqlite(db, purpose)
    wh = warehouse_location(cfg, resolve)
    if "://" not in wh:
        _check_folder(Path(wh), "catalog.warehouse", create=purpose == "write")


def _check_sqlite(db: Path, purpose: Purpose) -> None:
    folder = db.parent
    own = folder.name == DEFAULT_DIR and folder.parent.is_dir()  # icetide's default folder: run makes it
    if purpose == "read" and not db.is_file() and (own or folder.is_dir()):
        raise ConfigError(f"catalog.uri: no catalog at {db}: nothing has run with this config yet (icetide run "
                          "creates it), or the path is wrong")
    if not folder.is_dir():
        if not own:
            raise ConfigError(f"catalog.uri: the folder {folder} of the SQLite catalog does not exist; create it "
                              f"(mkdir -p {folder}) or fix the path")
        if purpose == "check":
            return
        folder.mkdir(exist_ok=True)
    target = db if db.exists() else folder
    if not os.access(target, os.W_OK if purpose != "read" else os.R_OK):
        raise ConfigError(f"catalog.uri: {target} is not {'readable' if purpose == 'read' else 'writable'} "
                          "by this user")


def _check_folder(path: Path, key: str, create: bool) -> None:
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"{key}: cannot create {path}: {e.strerror}") from None
        return
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK):
        raise ConfigError(f"{key}: {path} cannot be created here ({existing} is not a writable folder)")


def _check_driver(uri: str, jars: Callable[[], list[Path]], packages: str) -> None:
    """The JDBC driver of ``uri`` is on the classpath Spark will get (a jar, or a Maven package)."""
    sub = uri.split(":")[1] if uri.count(":") >= 2 else ""
    if sub not in DRIVERS:
        return  # a database icetide knows no driver for: Spark names it if it is missing
    cls, coordinate, name = DRIVERS[sub]
    if any(p.strip().startswith(coordinate + ":") for p in packages.split(",")):
        return
    for jar in jars():
        try:
            with zipfile.ZipFile(jar) as z:
                z.getinfo(cls)
            return
        except (KeyError, OSError, zipfile.BadZipFile):
            continue
    raise ConfigError(
        f"catalog.uri: jdbc:{sub} needs the {name} JDBC driver ({cls[:-6].replace('/', '.')}), which is not on "
        f"Spark's classpath; add it under spark.conf: spark.jars.packages: '{coordinate}:<version>' (fetched "
        "from Maven Central), or spark.jars: /path/to/the-driver.jar")
