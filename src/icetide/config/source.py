"""Section ``source``: the Kafka topics to read."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from icetide.config.base import Strict
from icetide.config.registry import SchemaRegistry
from icetide.errors import IdentifierError
from icetide.identifiers import validate_pipeline, validate_topic

#: The value formats a source can read: one per module of :mod:`icetide.ingest.formats` (a unit test
#: holds the two lists equal)
ValueFormatName = Literal["json", "avro", "json_schema", "protobuf"]
#: The value formats whose records name a schema in the registry (the Confluent wire format)
REGISTRY_FORMATS = frozenset({"avro", "json_schema", "protobuf"})


class KafkaSource(Strict):
    """Where records come from."""

    bootstrap_servers: str = Field(description="Kafka bootstrap servers, host:port[,host:port]")
    topics: list[str] | None = Field(default=None, description="Topics to read")
    topic_pattern: str | None = Field(
        default=None, description="Java regex of topics to read; new matching topics are picked up"
    )
    format: ValueFormatName = Field(
        default="json",
        description="How record values are encoded: json; avro (the Confluent wire format: byte 0, a 4-byte "
        "schema id, Avro binary); json_schema (the same header, then JSON text checked against its JSON Schema); "
        "or protobuf (the same header, the message indexes, then the Protobuf message). avro, json_schema and "
        "protobuf need schema_registry",
    )
    topic_formats: dict[str, ValueFormatName] = Field(
        default_factory=dict,
        description="Per-topic format where a pipeline reads several: topic name or Java regex → "
        "json|avro|json_schema|protobuf (the first match wins; unmatched topics use format)",
    )
    key_format: Literal["string", "avro"] = Field(
        default="string",
        description="How record keys land in _kafka_key: their bytes as text (string), or avro: decoded through "
        "the schema registry and kept as JSON text (a key that does not decode makes the record a dead letter)",
    )
    schema_registry: SchemaRegistry | None = Field(
        default=None,
        description="The schema registry Avro, JSON Schema and Protobuf values (and Avro keys) name their schema in",
    )
    starting_offsets: Literal["earliest", "latest"] = Field(
        default="earliest", description="Where a new pipeline (no checkpoint, no table offsets) starts"
    )
    on_data_loss: Literal["continue", "stop"] = Field(
        default="continue",
        description="When Kafka deleted records the pipeline had not read yet (retention ran while it "
        "was down): continue from the oldest records still there and report the gap per partition, "
        "or stop with the partitions and lost ranges named",
    )
    on_topic_recreated: Literal["restart", "stop"] = Field(
        default="restart",
        description="When a topic was deleted and created again under its name (told by Kafka's topic id, or an "
        "offset recorded beyond the partition's end): restart reads the new topic from its earliest offset, its "
        "old offsets set aside in every table and the checkpoint (every other topic goes on where it was); stop "
        "ends the run before writing, naming the topic",
    )
    adopt_offsets_from: str | None = Field(
        default=None,
        description="The name this pipeline ran under before (a rename): it resumes exactly where that "
        "pipeline stopped, from the offsets it left in the tables. Without it, a pipeline whose tables "
        "hold another pipeline's offsets for its topics refuses to start (it would ingest them again)",
    )
    max_offsets_per_trigger: int | None = Field(
        default=1_000_000, gt=0, description="Upper bound of records per micro-batch"
    )
    min_partitions: int | None = Field(default=None, gt=0, description="Spark input partitions")
    records_per_task: int | None = Field(
        default=125_000, gt=0,
        description="A micro-batch is read and written by about one task per this many records (rounded up to a "
        "multiple of the cores, at most one per Kafka partition): each task writes its own file per table "
        "partition, so a small batch from many Kafka partitions makes one file per table partition instead of "
        "one per Kafka partition. null, or min_partitions set: one task per Kafka partition (Spark's default)",
    )
    max_value_bytes: int = Field(
        default=8 * 1024 * 1024, gt=0, description="Larger values are dead-lettered as oversized"
    )
    max_depth: int = Field(
        default=32, ge=2, le=256,
        description="Records nested deeper (objects and arrays) are dead-lettered as too_deep",
    )
    max_fields: int = Field(
        default=2000, ge=1, le=100_000,
        description="Records with more field names (at all depths) are dead-lettered as too_wide",
    )
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Kafka consumer settings, e.g. security.protocol (kafka. prefix added); icetide sets "
                    "fetch.max.wait.ms to 50 (Spark reads bounded ranges) unless it is given here",
    )

    @field_validator("adopt_offsets_from")
    @classmethod
    def _pipeline_name(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                validate_pipeline(v)
            except IdentifierError as e:
                raise ValueError(str(e)) from None
        return v

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, v: str) -> str:
        for hp in v.split(","):
            host, _, port = hp.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"{hp!r} is not host:port")
        return v

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if not v:
                raise ValueError("list at least one topic")
            for t in v:
                try:
                    validate_topic(t)
                except IdentifierError as e:
                    raise ValueError(str(e)) from None
        return v

    @field_validator("topic_pattern")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a valid regular expression: {e}") from None
        return v

    @field_validator("topic_formats")
    @classmethod
    def _topic_formats(cls, v: dict[str, str]) -> dict[str, str]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"{pattern[:80]!r} is not a topic name or a valid regular expression: {e}") from None
        return v

    @model_validator(mode="after")
    def _one_subscription(self) -> KafkaSource:
        if (self.topics is None) == (self.topic_pattern is None):
            raise ValueError("set exactly one of 'topics' or 'topic_pattern'")
        if self.schema_registry is None and self.needs_registry():
            what = ("Avro" if "avro" in self.formats() or self.key_format == "avro"
                    else "JSON Schema" if "json_schema" in self.formats() else "Protobuf")
            raise ValueError(f"{what} needs schema_registry: {{url: ...}} (the registry the producers register "
                             "their schemas in)")
        return self

    def needs_registry(self) -> bool:
        return bool(REGISTRY_FORMATS & self.formats()) or self.key_format == "avro"

    def formats(self) -> set[str]:
        """Every value format this source may read."""
        return {self.format, *self.topic_formats.values()}

    def format_of(self, topic: str) -> str:
        """The value format of ``topic``: the first matching ``topic_formats`` entry, else ``format``."""
        for pattern, fmt in self.topic_formats.items():
            if pattern == topic or re.fullmatch(pattern, topic):
                return fmt
        return self.format
