"""Iceberg REST catalog: the production path."""

from __future__ import annotations

import importlib.util
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from icetide.catalog.fileio import fileio_properties as _fileio
from icetide.config.catalog import RestCatalog
from icetide.errors import ServiceUnreachableError, UnsupportedByReader


def _connection(cfg: RestCatalog) -> dict[str, str]:
    """Server, warehouse and credentials: the same keys for Iceberg's Java client and PyIceberg."""
    props = {"type": "rest", "uri": cfg.uri}
    if cfg.warehouse:
        props["warehouse"] = cfg.warehouse
    if cfg.credential:
        props["credential"] = cfg.credential.get_secret_value()
    if cfg.token:
        props["token"] = cfg.token.get_secret_value()
    return props


def catalog_properties(cfg: RestCatalog, resolve: Callable[[str], str]) -> dict[str, str]:
    return {**_connection(cfg), **cfg.properties}


def pyiceberg_properties(cfg: RestCatalog, resolve: Callable[[str], str]) -> dict[str, str]:
    """PyIceberg ``RestCatalog`` properties: the same server and credentials."""
    if cfg.properties.get("rest.sigv4-enabled", "").lower() == "true" and importlib.util.find_spec("boto3") is None:
        raise UnsupportedByReader("catalog.properties.rest.sigv4-enabled: PyIceberg signs requests with boto3, "
                                  "which is not installed (pip install 'icetide[aws]')")
    return {**_connection(cfg), **_fileio(cfg.properties)}


def check(cfg: RestCatalog, timeout: float = 10.0) -> None:
    """GET ``<uri>/v1/config``; a 401/403 still proves the server is there."""
    url = f"{cfg.uri}/v1/config"
    if cfg.warehouse:
        url += "?" + urllib.parse.urlencode({"warehouse": cfg.warehouse})
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    if cfg.token:
        req.add_header("Authorization", f"Bearer {cfg.token.get_secret_value()}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            json.load(resp)
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            return
        raise ServiceUnreachableError(
            f"catalog.uri: the REST catalog at {cfg.uri} answered HTTP {e.code} to GET /v1/config"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise ServiceUnreachableError(
            f"catalog.uri: cannot reach the REST catalog at {cfg.uri} ({reason})"
        ) from None
