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
from icetide.errors import ConfigError, ServiceUnreachableError, UnsupportedByReader


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


def _refused(cfg: RestCatalog, code: int) -> None:
    """A 401/403 to the config request: the server is there; the credentials given are wrong, or
    none were given where some are needed. Signed (SigV4) and OAuth2 client-credential catalogs
    authenticate in ways this unsigned request does not, so their refusal proves nothing."""
    if cfg.properties.get("rest.sigv4-enabled", "").lower() == "true" or (cfg.credential and not cfg.token):
        return
    if cfg.token:
        raise ConfigError(f"catalog.token: the REST catalog at {cfg.uri} refused the token (HTTP {code}); "
                          "give a valid one (it may have expired)")
    raise ConfigError(f"catalog: the REST catalog at {cfg.uri} needs credentials (HTTP {code}); set catalog.token "
                      "or catalog.credential (client_id:client_secret)")


def check(cfg: RestCatalog, timeout: float = 10.0) -> None:
    """GET ``<uri>/v1/config`` with the token given: refused credentials are a config error naming the key."""
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
            _refused(cfg, e.code)
            return
        raise ServiceUnreachableError(
            f"catalog.uri: the REST catalog at {cfg.uri} answered HTTP {e.code} to GET /v1/config"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise ServiceUnreachableError(
            f"catalog.uri: cannot reach the REST catalog at {cfg.uri} ({reason})"
        ) from None
