"""The checks ``icetide check`` and ``icetide run`` both make before anything expensive starts: the
config's own cross-checks (schema DDL, partition, sort and key columns) ran when it loaded; here the
catalog is really reached (nothing created unless running), Kafka answers and has the topics, and
with Avro, JSON Schema or Protobuf the schema registry answers (its subjects for the pipeline's topics,
their latest versions and compatibility levels; Protobuf's latest schemas compiled, a warning for each
that no table could hold).

Invariant: ``run`` refuses exactly what ``check`` refuses, with the same one line naming the key."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from icetide.catalog import check_reachable
from icetide.catalog.jdbc import Purpose
from icetide.config.ddl import suggest
from icetide.config.models import PipelineConfig
from icetide.config.source import REGISTRY_FORMATS
from icetide.errors import ConfigError, IcetideError
from icetide.ingest import source
from icetide.ingest.formats import registry

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
