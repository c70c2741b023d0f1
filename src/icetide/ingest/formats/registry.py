"""A client of the Confluent schema-registry API: schemas by id (cached for the run: an id's schema
never changes), a subject's versions (what schema references name; cached for the run too, see
:meth:`RegistryClient.version`), a subject's latest version, compatibility levels. Standard library
HTTP only.

Faults are sorted for the runner: an id the registry does not know (404) is the record's problem
(:class:`UnknownSchemaId`, a dead letter), and so is an id it answers with another definite refusal
(400, 410, 422: :class:`SchemaRefused`; Apicurio answers 400 for a schema its own parser cannot
read); refused credentials are configuration (:class:`~icetide.errors.ConfigError`), except on a
request for one subject's version (a schema reference), where 401/403 is access to that subject
denied (:class:`SchemaRefused`: the schemas referencing it are refused, the run goes on); anything
else (down, slow, 5xx) is waited out with exponential backoff up to ``max_wait_s``, then
:class:`RegistryUnavailable` (transient: the batch fails, nothing is dead-lettered, the run restarts it).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
from collections.abc import Callable
from typing import Any

from icetide.config.registry import SchemaRegistry
from icetide.errors import ConfigError, TransientError
from icetide.ingest.formats.registry_http import Transport

log = logging.getLogger(__name__)


class UnknownSchemaId(LookupError):
    """The registry answered 404 for a schema id."""


class SchemaRefused(LookupError):
    """The registry answered a schema id with a definite refusal other than 404 (the message says what)."""


#: Answers about the request itself, not the registry's health: never waited out
REFUSALS = (400, 410, 422)


class RegistryUnavailable(TransientError):
    """The registry did not answer within ``schema_registry.max_wait_s``."""


class RegistryClient:
    def __init__(self, cfg: SchemaRegistry, sleep: Callable[[float], None] = time.sleep) -> None:
        self.cfg = cfg
        self._sleep = sleep
        self._schemas: dict[int, dict[str, Any]] = {}
        self._versions: dict[tuple[str, int], dict[str, Any]] = {}
        self._http = Transport(cfg)  # URLs in turn, TLS, credentials (see .registry_http)
        #: seconds this client spent waiting for the registry (figures for the batch log)
        self.waited_s = 0.0
        self.outage_since: float | None = None
        #: called once when an outage begins, with what failed (the runner raises an alert)
        self.on_outage: Callable[[str], None] | None = None
        #: ids served before that the registry answers 404 for (since when), and those taken as deleted
        self._witness_404_since: dict[int, tuple[float, float]] = {}  # id → (first, last) 404 of a run of them
        self._gone: set[int] = set()

    # -- requests ---------------------------------------------------------------------------------
    def _get_once(self, path: str) -> Any:
        return self._http.get_once(path)

    def get(self, path: str, scoped: bool = False) -> Any:
        """GET ``path`` as JSON; waits out outages (see the module docstring); 404 → :class:`KeyError`.
        ``scoped``: a request for one subject's schema (a schema reference), which access control can
        refuse alone while the credentials read other subjects: 401/403 is then :class:`SchemaRefused`
        (that schema's records are dead letters), not :class:`~icetide.errors.ConfigError`."""
        started = time.monotonic()
        delay = 0.5
        attempt = 0
        while True:
            attempt += 1
            try:
                out = self._get_once(path)
                self._outage_over()
                return out
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    raise KeyError(path) from None
                if e.code in REFUSALS:
                    raise SchemaRefused(f"the registry answers HTTP {e.code} ({_message(e)})") from None
                if e.code in (401, 403) and self._http.renew():
                    continue  # a renewed token (bearer_token_env): asked again at once
                if e.code in (401, 403) and scoped:
                    raise SchemaRefused(f"the registry refuses access to it (HTTP {e.code}: {_message(e)})") from None
                if e.code in (401, 403):
                    raise ConfigError(f"source.schema_registry: the registry at {self._http.shown} refused "
                                      f"the credentials (HTTP {e.code}); check basic_auth_user_info, "
                                      "bearer_token or bearer_token_env") from None
                why = f"HTTP {e.code}"
            except (OSError, ValueError) as e:  # refused, reset, timeout, TLS, a proxy's HTML
                why = f"{type(e).__name__}: {str(e)[:200]}"
            waited = time.monotonic() - started
            self._outage(started, why)
            if waited + delay > self.cfg.max_wait_s:
                raise RegistryUnavailable(
                    f"schema registry {self._http.shown} did not answer for {waited:.0f} s ({why}); "
                    f"the batch is retried (source.schema_registry.max_wait_s={self.cfg.max_wait_s:g})")
            log.warning("schema registry %s unavailable (%s), attempt %d; retrying in %.1f s (records wait, none "
                        "are dead-lettered)", self._http.shown, why, attempt, delay)
            self._sleep(delay)
            self.waited_s += delay
            delay = min(delay * 2, 15.0)

    def _outage(self, started: float, why: str) -> None:
        """An outage begins (when none is on): remember since when, and raise the alert once."""
        if self.outage_since is not None:
            return
        self.outage_since = started
        if self.on_outage is not None and self.cfg.max_wait_s > 0:
            try:
                self.on_outage(why)
            except Exception as e:  # an alert never stops the batch
                log.warning("could not raise the registry alert: %s", str(e)[:200])

    def _outage_over(self) -> None:
        """The registry answers again (a wait that ends with its 404 believed counts too): the outage is over."""
        if self.outage_since is not None:
            log.warning("schema registry %s answers again after %.0f s", self._http.shown,
                        time.monotonic() - self.outage_since)
            self.outage_since = None

    # -- the API --------------------------------------------------------------------------------
    def schema(self, schema_id: int) -> dict[str, Any]:
        """``{"schema": text, "schemaType": ..., "references": [...]}`` of a schema id, cached.

        A 404 is believed only from a registry that still serves the ids it gave this client before
        (:meth:`_serves_its_ids`): one starting up (Apicurio answers before its storage is read), or
        restored from an old backup, would otherwise make every record of a new id a dead letter.
        Such a 404 is waited out as an outage, up to ``max_wait_s``; then it is believed."""
        if schema_id in self._schemas:
            return self._schemas[schema_id]
        started, delay = time.monotonic(), 0.5
        while True:
            try:
                self._schemas[schema_id] = self.get(f"/schemas/ids/{int(schema_id)}")
                return self._schemas[schema_id]
            except KeyError:
                if self._serves_its_ids():
                    self._outage_over()
                    raise UnknownSchemaId(schema_id) from None
            waited = time.monotonic() - started
            if waited + delay > self.cfg.max_wait_s:
                log.warning("schema registry %s: believing its 404 for schema id %s after %.0f s, although it "
                            "does not serve schema ids it gave before either", self._http.shown, schema_id, waited)
                self._outage_over()
                raise UnknownSchemaId(schema_id)
            why = f"answers 404 for schema id {schema_id} and for ids it served before (not serving its data yet)"
            self._outage(started, why)  # an outage like any other: the alert, and "answers again" after
            log.warning("schema registry %s %s; asking again in %.1f s (records wait)", self._http.shown, why, delay)
            self._sleep(delay)
            self.waited_s += delay
            delay = min(delay * 2, 15.0)

    def _serves_its_ids(self) -> bool:
        """Whether the registry answers a schema id it answered this client before (the first learned,
        then the next while one turns out deleted); True when there is none to ask. A witness that
        has answered 404 for ``max_wait_s`` is taken as deleted (a hard delete), not as a registry
        that is not serving yet; one that answers again is trusted again."""
        for witness in list(self._schemas):
            if witness in self._gone:
                continue
            try:
                self._get_once(f"/schemas/ids/{int(witness)}")
                self._witness_404_since.pop(witness, None)
                return True
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    return False  # not answering properly (5xx, refused access): not a 404 to believe
                now = time.monotonic()
                since, last = self._witness_404_since.get(witness, (now, now))
                if now - last > self.cfg.max_wait_s:  # 404s long apart (two restarts): count afresh
                    since = now
                self._witness_404_since[witness] = (since, now)
                if now - since >= self.cfg.max_wait_s:  # deleted for good: ask another one
                    self._gone.add(witness)
                    continue
                return False
            except (OSError, ValueError):
                return False
        return True

    def version(self, subject: str, version: int) -> dict[str, Any]:
        """One registered version of a subject (``schema``, ``schemaType``, ``references``: what a schema
        reference names), cached for the run; :class:`UnknownSchemaId` when the registry has no such
        subject or version, :class:`SchemaRefused` when it refuses it (400, 410, 422, or 401/403: access
        to that subject denied). A subject hard-deleted and registered again, so that a version number
        now names another schema, is read as first fetched until the run restarts (Confluent never
        reuses a version number short of a hard delete)."""
        key = (subject, int(version))
        if key not in self._versions:
            try:
                got = self.get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{int(version)}",
                               scoped=True)
            except KeyError:
                raise UnknownSchemaId(f"{subject} version {version}") from None
            self._versions[key] = got if isinstance(got, dict) else {}
        return self._versions[key]

    def latest(self, subject: str) -> dict[str, Any] | None:
        """The subject's latest version (``id``, ``version``, ``schema``), None when there is no such subject."""
        try:
            out = self.get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest")
        except KeyError:
            return None
        return out if isinstance(out, dict) else None

    def subjects(self) -> list[str]:
        out = self.get("/subjects")
        return [str(s) for s in out] if isinstance(out, list) else []

    def compatibility(self, subject: str) -> str | None:
        """The subject's compatibility level (falling back to the global one)."""
        for path in (f"/config/{urllib.parse.quote(subject, safe='')}?defaultToGlobal=true", "/config"):
            try:
                out = self.get(path)
            except KeyError:
                continue
            level = out.get("compatibilityLevel") or out.get("compatibility")
            if level:
                return str(level)
        return None


def _message(e: urllib.error.HTTPError) -> str:
    """The registry's own message in an error answer (Confluent's ``message``), else its reason."""
    try:
        body = json.loads(e.read()[:4000] or b"{}")
    except (OSError, ValueError):
        body = {}
    msg = body.get("message") if isinstance(body, dict) else None
    return str(msg or e.reason)[:300]


def subject(strategy: str, topic: str, record_full_name: str, key: bool = False) -> str:
    """A subject's name under a naming strategy (Confluent's TopicName/RecordName/TopicRecordName)."""
    if strategy == "record_name":
        return record_full_name
    if strategy == "topic_record_name":
        return f"{topic}-{record_full_name}"
    return f"{topic}-{'key' if key else 'value'}"


#: Compatibility levels at least as strict as BACKWARD (a consumer with the newest schema reads old data).
SAFE_LEVELS = {"BACKWARD", "BACKWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"}


def preflight(cfg: SchemaRegistry, topics: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The subjects of ``topics`` (latest version and compatibility) and warnings; one request
    each, no waiting. Raises :class:`~icetide.errors.ServiceUnreachableError` naming the key when the
    registry does not answer, :class:`~icetide.errors.ConfigError` when it refuses the credentials."""
    from icetide.errors import ServiceUnreachableError

    client = RegistryClient(cfg.model_copy(update={"max_wait_s": 0.0, "timeout_s": min(cfg.timeout_s, 5.0)}))
    try:
        names = client.subjects()
    except RegistryUnavailable as e:
        raise ServiceUnreachableError(f"source.schema_registry.url: {e.args[0].split(';')[0]}; check the URL "
                                      "(Apicurio: …/apis/ccompat/v7) and that the registry runs") from None
    strategy = cfg.subject_name_strategy
    mine = sorted(s for s in names if (strategy == "topic_name" and s in {f"{t}-value" for t in topics})
                  or (strategy == "topic_record_name" and any(s.startswith(f"{t}-") for t in topics))
                  or strategy == "record_name")
    out: list[dict[str, Any]] = []
    warnings: list[str] = []
    for s in mine:
        latest = client.latest(s) or {}
        level = client.compatibility(s)
        out.append({"subject": s, "version": latest.get("version"), "id": latest.get("id"), "compatibility": level})
        if level is not None and level not in SAFE_LEVELS:
            warnings.append(f"subject {s}: compatibility {level} is weaker than BACKWARD: a producer can register a "
                            "schema whose records the table cannot take (they become dead letters); set BACKWARD or "
                            "FULL_TRANSITIVE")
    if strategy == "topic_name":
        for t in topics:
            if f"{t}-value" not in names:
                warnings.append(f"topic {t}: no subject {t}-value in the registry yet (records will name their "
                                "schema ids; check subject_name_strategy if producers use record names)")
    return out, warnings
