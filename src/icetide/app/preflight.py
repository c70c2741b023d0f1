"""The checks ``icetide check`` and ``icetide run`` both make before anything expensive starts: the
config's own cross-checks (schema DDL, partition, sort and key columns) ran when it loaded; here the
catalog is really reached (nothing created unless running), Kafka answers and has the topics, and
with Avro, JSON Schema or Protobuf the schema registry answers (its subjects for the pipeline's topics,
their latest versions and compatibility levels; Protobuf's latest schemas compiled, a warning for each
that no table could hold).

Invariant: ``run`` refuses exactly what ``check`` refuses, with the same one line naming the key.
A pipeline that has run before waits for a service that does not answer (:func:`preflight_run`):
a supervisor restarting it while the broker, the catalog or the registry restarts must not find it
stopped as if its config were wrong."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from icetide import paths
from icetide.catalog import check_reachable
from icetide.catalog.jdbc import Purpose
from icetide.config.ddl import suggest
from icetide.config.models import PipelineConfig
from icetide.config.source import REGISTRY_FORMATS
from icetide.errors import ConfigError, IcetideError, ServiceUnreachableError, StoppedBeforeStart
from icetide.ingest import source
from icetide.ingest.formats import registry
from icetide.loops import RestartBudget
from icetide.secrets import error_line

log = logging.getLogger(__name__)

Outcome = Literal["ok", "warning", "error", "skipped"]


@dataclass
class Check:
    name: str  # catalog | kafka | topics | schema_registry
    outcome: Outcome
    detail: str = ""


@dataclass
class Preflight:
    topics: dict[str, int] = field(default_factory=dict)  # topic → partitions
    subjects: list[dict[str, Any]] = field(default_factory=list)  # the registry's subjects of the topics
    warnings: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    errors: list[IcetideError] = field(default_factory=list)

    def step(self, name: str, fn: Callable[[], str], collect: bool) -> bool:
        """Run one check; record its outcome. An error is raised at once unless ``collect``."""
        before = len(self.warnings)
        try:
            detail = fn()
        except IcetideError as e:
            if not collect:
                raise
            self.errors.append(e)
            self.checks.append(Check(name, "error", str(e)))
            return False
        outcome: Outcome = "warning" if len(self.warnings) > before else "ok"
        self.checks.append(Check(name, outcome, "; ".join(self.warnings[before:]) or detail))
        return True


def preflight(cfg: PipelineConfig, purpose: Purpose = "write", collect: bool = False) -> Preflight:
    """Raise (naming the key) on the first failed check, or with ``collect`` record every check's
    outcome and go on where it can; warnings are for what will still run. ``purpose`` check creates
    nothing; write (a run) may create icetide's own catalog folder."""
    out = Preflight()
    out.step("catalog", lambda: _catalog(cfg, purpose), collect)
    parts: dict[str, list[int]] = {}

    def kafka() -> str:
        parts.update(source.list_partitions(cfg.source))
        out.topics = {t: len(p) for t, p in parts.items()}
        return f"{cfg.source.bootstrap_servers} answers"

    if out.step("kafka", kafka, collect):
        out.step("topics", lambda: _topics(cfg, out), collect)
    else:
        out.checks.append(Check("topics", "skipped", "Kafka did not answer"))
    reg = cfg.source.schema_registry
    if reg is not None and REGISTRY_FORMATS & cfg.source.formats():
        named = parts or dict.fromkeys(cfg.source.topics or [])
        topics = sorted(t for t in named if cfg.source.format_of(t) in REGISTRY_FORMATS)

        def subjects() -> str:
            out.subjects, warnings = registry.preflight(reg, topics)
            out.warnings.extend(warnings)
            if "protobuf" in cfg.source.formats():
                from icetide.ingest.formats.protobuf_schema import check_subjects

                client = registry.RegistryClient(reg.model_copy(update={"max_wait_s": 0.0}))
                out.warnings.extend(check_subjects(client, out.subjects))
            return f"{len(out.subjects)} subjects"

        out.step("schema_registry", subjects, collect)
    for w in out.warnings:
        log.warning("%s", w)
    return out


def _stopped(e: Exception) -> StoppedBeforeStart:
    return StoppedBeforeStart(f"stopped by a signal while waiting at the start ({error_line(e)}): nothing ran")


def preflight_run(cfg: PipelineConfig, sleep: Callable[[float], None] | None = None,
                  stopped: Callable[[], bool] = lambda: False) -> Preflight:
    """``run``'s preflight. A pipeline that has run before (its checkpoint folder exists; one on a
    remote file system is taken to) waits for a service that does not answer as a running pipeline
    waits out a failure: ``stream.restart_attempts`` tries, 2 s apart doubling up to 60 s, a WARNING
    each; a stop signal (``stopped``) ends the wait at once (:class:`StoppedBeforeStart`: exit 0, as
    a running pipeline stopped by a signal exits). A new
    pipeline, and any config mistake, fails at once, naming the key."""
    budget = RestartBudget(cfg.stream.restart_attempts if has_run(cfg) else 0)
    while True:
        try:
            return preflight(cfg)
        except IcetideError as e:
            waitable = isinstance(e, ServiceUnreachableError) or not e.terminal
            if waitable and budget.attempts and stopped():
                raise _stopped(e) from e
            if not waitable or not budget.failed(0):
                raise
            wait = budget.backoff()
            log.warning("%s; the pipeline has run before, so it waits for it: trying again in %.0fs "
                        "(%d of stream.restart_attempts %d)", error_line(e), wait,
                        budget.used,
                        budget.attempts)
            (sleep or (lambda secs: _nap(secs, stopped)))(wait)
            if stopped():
                raise _stopped(e) from e


def _nap(seconds: float, stopped: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while not stopped() and time.monotonic() < end:
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))


def has_run(cfg: PipelineConfig) -> bool:
    """Whether the pipeline has run before: its checkpoint folder exists (a remote one, e.g.
    ``s3://``, is taken to), or a query of it started on this machine (:func:`note_started`: a
    checkpoint deleted or set aside does not make a pipeline new; chaos seed 1202)."""
    ckpt = cfg.checkpoint_dir()
    if "://" in ckpt and not ckpt.startswith("file:"):
        return True
    return Path(ckpt.removeprefix("file://").removeprefix("file:")).exists() or _started_marker(cfg).exists()


def note_started(cfg: PipelineConfig) -> None:
    """Remember that a query of this pipeline (by its checkpoint location) started on this machine."""
    try:
        marker = _started_marker(cfg)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(cfg.checkpoint_dir() + "\n")
    except OSError as e:  # only the start's wait depends on it
        log.debug("could not note the start: %s", e)


def _started_marker(cfg: PipelineConfig) -> Path:
    digest = hashlib.sha256(cfg.checkpoint_dir().encode()).hexdigest()[:24]
    return paths.home() / "started" / digest


def _catalog(cfg: PipelineConfig, purpose: Purpose) -> str:
    check_reachable(cfg, purpose)
    return f"{cfg.catalog.type} catalog at {cfg.catalog.uri.split('?')[0]}"


def _topics(cfg: PipelineConfig, found: Preflight) -> str:
    """A listed topic Kafka does not have is a config mistake (Spark would retry it forever); a
    pattern that matches nothing yet is a warning: the run waits for a topic to appear."""
    src = cfg.source
    if src.topics is not None:
        missing = [t for t in src.topics if t not in found.topics]
        if missing:
            hint = suggest(missing[0], source.topic_names(src))
            raise ConfigError(
                f"source.topics: Kafka at {src.bootstrap_servers} has no topic "
                f"{', '.join(repr(t) for t in missing)}{hint}; create it (kafka-topics.sh --create --topic "
                "NAME) or fix the name")
    elif not found.topics:
        found.warnings.append(f"source.topic_pattern: no topic on Kafka matches {src.topic_pattern!r} yet; "
                              "the run will wait for one")
    return ", ".join(f"{t} ({n} partitions)" for t, n in sorted(found.topics.items()))
