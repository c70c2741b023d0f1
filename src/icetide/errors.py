"""Exceptions, marked terminal (fix something, then rerun) or transient (retrying may succeed)."""

from __future__ import annotations


class IcetideError(Exception):
    """Base class. ``terminal`` tells a runner whether retrying can help."""

    terminal: bool = True


class ConfigError(IcetideError):
    """The configuration is invalid; the message names the key to change."""


class ServiceUnreachableError(IcetideError):
    """A service named in the configuration (Kafka, a catalog) cannot be reached."""


class StoppedBeforeStart(IcetideError):
    """A stop signal ended a run while it waited at its start for a service: not a failure (exit 0)."""

    terminal = False


class SetupError(IcetideError):
    """A required local dependency (jars, Java, the Kafka distribution) is missing."""


class IdentifierError(IcetideError):
    """A table, namespace or column name is not allowed (see ``icetide.identifiers``)."""


class NotFoundError(IcetideError):
    """A table or namespace named on the command line does not exist (exit 2, like a config mistake)."""


class UnsupportedByReader(IcetideError):
    """The JVM-free reader (PyIceberg) cannot open this catalog; read it through Spark instead."""


class CheckpointMismatchError(IcetideError):
    """The streaming checkpoint and the offsets recorded in the tables disagree."""


class DataLossError(IcetideError):
    """Kafka no longer holds records the pipeline had not read, and ``source.on_data_loss`` is ``stop``."""


class TopicRecreatedError(IcetideError):
    """A topic was deleted and created again since its offsets were recorded, and
    ``source.on_topic_recreated`` is ``stop`` (or, raised by a batch, the query must start again)."""


class TransientError(IcetideError):
    """A failure that may succeed when retried (commit conflicts, broker hiccups)."""

    terminal = False


#: Text every fenced commit's error carries (icetide's JVM ``LedgerFence`` and :class:`FencedError`).
FENCE_MARKER = "icetide-fence:"


class FencedError(TransientError):
    """Another process of the same pipeline committed to a table since this run read its ledger.

    Nothing of the batch was committed to that table. The run stands by (see
    :mod:`icetide.app.runner`) instead of racing the other writer."""


#: Text a batch's failure carries when it came from handling the batch's records rather than from the
#: configuration: the runner restarts (within its budget) instead of stopping at once.
BATCH_MARKER = "icetide-batch-failed:"


class BatchFailedError(TransientError):
    """Handling one batch's records failed for a reason that is not a configuration mistake (a
    Spark analysis or write error a record's name or value provoked, an engine bug). Transient: the
    batch replays, and the restart budget stops a run that fails the same way every time."""


def is_fenced(exc: BaseException) -> bool:
    return isinstance(exc, FencedError) or FENCE_MARKER in str(exc)


# What Iceberg says when a commit lost an optimistic-concurrency race or failed validation against a
# concurrent commit (the text of the JVM exception as it reaches Python): retrying on fresh metadata
# can succeed. Classified here once, for maintenance's rewrites and ingest's MERGEs alike.
_CONFLICT_MARKERS = ("CommitFailedException", "ValidationException", "found new position delete",
                     "Cannot commit", "conflict", "CommitStateUnknownException", "Missing required files to delete",
                     "Found conflicting files", "found new delete", "Cannot fast-forward")


def is_commit_conflict(exc: BaseException) -> bool:
    """True when ``exc`` is a commit conflict with a concurrent writer (transient: retry the commit)."""
    if isinstance(exc, IcetideError):
        return not exc.terminal and not getattr(exc, "replays_batch", False)
    text = str(exc)
    return any(m in text for m in _CONFLICT_MARKERS)
