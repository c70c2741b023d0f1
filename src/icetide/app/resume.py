"""Where a query without a usable checkpoint resumes: the recorded positions, and what Kafka's
retention deleted above them while the pipeline was away (#41, hole 5).

Never in silence: with ``source.on_data_loss: continue`` the gap is a WARNING, the run's counters
and summary, and a ``kafka_gap`` alert, as a batch's gap is; with ``stop`` the run ends before
anything is read, naming the partitions, the lost ranges and the choice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from icetide.app import run_alerts
from icetide.config.models import PipelineConfig
from icetide.errors import DataLossError
from icetide.ingest import retention, source
from icetide.lake.offsets import TopicPartition

if TYPE_CHECKING:
    from icetide.ingest.sink import BatchWriter

log = logging.getLogger(__name__)


def starting_json(cfg: PipelineConfig, writer: BatchWriter, resume: dict[TopicPartition, int]) -> str:
    """Spark's ``startingOffsets`` for ``resume``; what retention deleted above it (see
    :func:`~icetide.ingest.source.starting_offsets_json`) reported or, with ``source.on_data_loss:
    stop``, :class:`DataLossError` before the query starts.

    Above the highest offset any of the pipeline's tables holds, every record is lost (``stop``
    stops for it); below it, a table that holds less (a batch a crash left partial, some tables
    committed it) may have lost the records routed to it, and the report names the table (never a
    stop: the table may have had no records there)."""
    offsets, gone = source.starting_offsets_json(cfg.source, resume)
    lost, tables = retention.split_lost(gone, writer.nexts())
    if not lost and not tables:
        return offsets
    what = retention.describe_all(lost, tables)
    if lost and cfg.source.on_data_loss == "stop":
        raise DataLossError(
            f"source.on_data_loss: Kafka no longer holds records pipeline '{cfg.name}' had not read (its retention "
            f"deleted them while the pipeline was away): {retention.describe_lost(lost)}. Nothing was read. To skip "
            "them and go on, set source.on_data_loss: continue (the gap is logged and counted); to keep them, "
            "produce them to the topic again first")
    log.warning("Kafka deleted records before the pipeline read them (retention, while it was away); starting "
                "from the oldest still there (source.on_data_loss: continue). Lost: %s", what)
    for gaps in writer.counters.unreported(retention.gap_keys(lost, tables)):
        writer.counters.add_gaps(gaps)
        run_alerts.gap(cfg, None, gaps)
    return offsets
