"""How the schema-registry client reaches the registry (#40 item 6): its URLs in turn (failover),
TLS with a client certificate whose key may be encrypted, and credentials, a bearer token read
again from its environment variable when the registry refuses the one in use.

Failover: a URL that does not answer (refused, reset, timeout, TLS) or answers 5xx/429 passes the
request to the next; the first that answers is used from then on. Any other answer (a 404, a
refusal, 401/403) is the registry's word and is not asked of the others. When none answers the
error goes to the client's outage handling (waited out, :mod:`.registry`).

Secrets (the token, the key's password, basic-auth credentials) never reach a message or a log:
URLs are shown by :func:`~icetide.secrets.safe_url`, and a token read from the environment is
registered with :mod:`icetide.secrets` so every output masks it.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import urllib.error
import urllib.request
from typing import Any

from icetide import secrets
from icetide.config.registry import SchemaRegistry
from icetide.errors import ConfigError
from icetide.secrets import safe_url

log = logging.getLogger(__name__)

#: HTTP answers that mean "this registry cannot serve now": the next URL is asked
FAIL_OVER = (429, 500, 502, 503, 504)


class Transport:
    """GET requests to one registry's URLs, with its TLS and credentials."""

    def __init__(self, cfg: SchemaRegistry) -> None:
        self.cfg = cfg
        self.urls = cfg.urls
        self.current = 0  # the URL that answered last
        self.shown = ", ".join(safe_url(u) for u in self.urls)
        self.headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        self.token = ""
        if cfg.basic_auth_user_info is not None:
            basic = base64.b64encode(cfg.basic_auth_user_info.get_secret_value().encode()).decode()
            self.headers["Authorization"] = f"Basic {basic}"
        elif cfg.bearer_token is not None:
            self.headers["Authorization"] = f"Bearer {cfg.bearer_token.get_secret_value()}"
        elif cfg.bearer_token_env is not None:
            self.renew()
        self.ssl = tls(cfg) if any(u.startswith("https") for u in self.urls) else None

    def renew(self) -> bool:
        """Read the bearer token from ``bearer_token_env`` again; whether it changed (False without one)."""
        name = self.cfg.bearer_token_env
        token = os.environ.get(name, "") if name else ""
        if not token or token == self.token:
            return False
        secrets.register(token)
        self.token = token
        self.headers["Authorization"] = f"Bearer {token}"
        if name:
            log.info("schema registry: bearer token read from %s", name)
        return True

    def get_once(self, path: str) -> Any:
        """``path`` from the first URL that answers, starting with the one that answered last."""
        last: BaseException | None = None
        for n in range(len(self.urls)):
            i = (self.current + n) % len(self.urls)
            req = urllib.request.Request(self.urls[i] + path, headers=self.headers)
            try:
                with urllib.request.urlopen(req, timeout=self.cfg.timeout_s, context=self.ssl) as r:
                    out = json.loads(r.read())
            except urllib.error.HTTPError as e:
                if e.code not in FAIL_OVER or len(self.urls) == 1:
                    raise
                last = e
            except (OSError, ValueError) as e:  # refused, reset, timeout, TLS, a proxy's HTML
                if len(self.urls) == 1:
                    raise
                last = e
            else:
                if i != self.current:
                    log.warning("schema registry %s did not answer; %s did and is used from now on",
                                safe_url(self.urls[self.current]), safe_url(self.urls[i]))
                    self.current = i
                return out
            log.warning("schema registry %s: %s; asking the next URL", safe_url(self.urls[i]),
                        f"HTTP {last.code}" if isinstance(last, urllib.error.HTTPError)
                        else f"{type(last).__name__}: {str(last)[:200]}")
        assert last is not None
        raise last


def tls(cfg: SchemaRegistry) -> ssl.SSLContext | None:
    """The TLS context of ``cfg`` (None: the system's defaults); :class:`ConfigError` naming the key
    when a file or the key's password does not work."""
    if not (cfg.ca_location or cfg.certificate_location):
        return None
    try:
        ctx = ssl.create_default_context(cafile=cfg.ca_location)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"source.schema_registry.ca_location: cannot read a CA certificate from "
                          f"{cfg.ca_location} ({type(e).__name__}: {str(e)[:120]}); give a PEM file") from None
    if cfg.certificate_location:
        password = cfg.key_password.get_secret_value() if cfg.key_password is not None else None
        try:
            ctx.load_cert_chain(cfg.certificate_location, cfg.key_location, password=password or (lambda: ""))
        except (OSError, ssl.SSLError) as e:
            key = "key_password" if password is not None or _encrypted(cfg.key_location) else "certificate_location"
            fix = ("check key_password (the password of key_location's private key)" if key == "key_password"
                   else "give a PEM certificate and its private key (key_location)")
            raise ConfigError(f"source.schema_registry.{key}: the client certificate {cfg.certificate_location} "
                              f"and its key could not be loaded ({type(e).__name__}); {fix}") from None
    return ctx


def _encrypted(path: str | None) -> bool:
    """Whether the PEM key file at ``path`` is encrypted (a missing password is then the problem)."""
    try:
        with open(path or "", encoding="ascii", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return "ENCRYPTED" in head
