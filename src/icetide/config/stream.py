"""Sections ``dead_letter``, ``stream`` and ``spark``: how the streaming query runs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from icetide.config.base import Interval, Strict, TableId, interval_seconds


class DeadLetter(Strict):
    """Where records that cannot be written go, with the reason."""

    table: TableId = Field(default="icetide.dead_letters", description="namespace.table")
    retention: Interval | None = Field(
        default=None,
        description="Maintenance deletes dead letters whose Kafka timestamp is older than this (whole days); "
        "null (default): keep them until you delete them, replayed or not",
    )
    replay_log_table: TableId | None = Field(
        default=None, description="namespace.table recording replayed dead letters (default: <table>_replayed)"
    )

    def replay_log(self) -> str:
        return self.replay_log_table or f"{self.table}_replayed"


class StreamSettings(Strict):
    """Structured Streaming settings."""

    trigger_interval: Interval = Field(default="60 seconds", description="Micro-batch trigger interval")
    checkpoint_location: str = Field(
        default=".icetide/checkpoints/{pipeline}",
        description="Spark checkpoint folder or URI; {pipeline} is replaced by the pipeline name",
    )
    on_missing_checkpoint: Literal["resume", "fail"] = Field(
        default="resume",
        description="When the checkpoint is gone: resume from offsets recorded in the tables, or fail",
    )
    restart_attempts: int = Field(
        default=10, ge=0,
        description="Restarts after consecutive transient failures, 2 s apart doubling up to 60 s (10: about 6 "
        "minutes of a broker or catalog being down); the count resets once a batch commits. A run of a pipeline "
        "that has run before (its checkpoint exists) waits the same way for Kafka, the catalog or the registry "
        "to answer at its start; a new pipeline fails at once")
    on_fenced: Literal["standby", "exit"] = Field(
        default="standby",
        description="When another process of the same pipeline commits to its tables (a second run, a zombie): "
        "standby: stop writing, watch, and take over once the other has not committed for takeover_after; "
        "exit: stop with an error",
    )
    takeover_after: Interval = Field(
        default="60 seconds",
        description="A standby run takes over once no other run of the pipeline has committed for this long",
    )
    stop_timeout: Interval = Field(
        default="120 seconds",
        description="On SIGTERM/SIGINT, how long the running batch may take to finish before it is abandoned "
        "(an abandoned batch is replayed, exactly once, by the next run)",
    )
    watermark_mirror_interval: Interval = Field(
        default="60 seconds",
        description="At most this often, copy each table's offsets into a table property (one extra commit); "
        "maintenance also copies them before it expires snapshots",
    )
    table_write_parallelism: int = Field(
        default=4, ge=1, le=64, description="Tables of one micro-batch written concurrently (each commits once)"
    )
    multi_table_write: bool = Field(
        default=True,
        description="With routing, write the appends of all tables of a micro-batch in one Spark job "
        "(each table still commits on its own); false: one Spark job per table",
    )
    one_pass_write: bool = Field(
        default=True,
        description="With multi_table_write, first write the batch's JSON or Avro records for existing tables "
        "(routed, or the one target table) in one pass over the batch (no cache), committing each table whose "
        "records show only shapes (Avro: schema ids learned before) it is known to fit; new tables, new shapes "
        "and bad records then take the usual two passes. false: always two passes",
    )
    decode_in_task: bool = Field(
        default=True,
        description="In the one pass, decode each JSON value in the write task, once, from its UTF-8 bytes (its "
        "checks, shape and row from one token stream, with Spark's own converter); false: Spark expressions "
        "(a check UDF, then from_json). Same rows and dead letters either way",
    )
    discovery_records: int = Field(
        default=1000,
        ge=0,
        le=1_000_000,
        description="Routed JSON pipelines, with one_pass_write: when no table was written lately (a run's first "
        "batch), read this many records from the head of each Kafka partition of the batch first; the existing "
        "tables they route to, and the new ones with a declared schema (target.schema, target.tables.<glob>.schema), "
        "created from it, take the whole batch in one pass; what they missed, and tables whose columns come from "
        "their records, take the usual two passes. 0: the usual two passes for such a batch",
    )
    batch_log_table: TableId | None = Field(
        default="icetide.ingest_batches",
        description="namespace.table keeping per-batch metrics per table (null: log only)",
    )
    batch_log_interval: Interval = Field(
        default="30 seconds",
        description="The batch log's rows are appended together at most this often (and when the run stops), "
        "on a thread of their own: one small Iceberg commit, kept out of the micro-batch. 0 seconds: after every "
        "batch (while none is in flight)",
    )

    def trigger_seconds(self) -> float:
        return interval_seconds(self.trigger_interval)


class SparkSettings(Strict):
    """How the SparkSession is built."""

    master: str | None = Field(
        default="local[*]",
        description="Spark master URL; null to take it from spark-submit/SPARK_MASTER",
    )
    app_name: str | None = Field(default=None, description="Default: icetide-<pipeline>")
    jars: Literal["local", "packages", "none"] = Field(
        default="local",
        description="local: jars fetched by `icetide setup`; packages: spark.jars.packages (Ivy); "
        "none: the cluster provides them",
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings")
