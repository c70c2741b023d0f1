"""What a failed query's (JVM-wrapped) error says: whether restarting can help, and its one line."""

from __future__ import annotations

from icetide.errors import BATCH_MARKER, FENCE_MARKER

_SPARK_55271 = ('Cannot invoke "scala.collection.IterableOps.map(scala.Function1)" because the '
                'return value of "scala.Option.get()" is null')


def spark_kafka_metrics_npe(e: BaseException) -> bool:
    return _SPARK_55271 in str(e)


def terminal(e: BaseException) -> bool:
    """Whether restarting cannot help. A failure of handling a batch's records (marked by the sink,
    :data:`~icetide.errors.BATCH_MARKER`) never is: only configuration and the source can be."""
    text = str(e)
    if BATCH_MARKER in text and "ConfigError" not in text:
        return False
    markers = ("DataLossError", "TopicRecreatedError", "AnalysisException", "ConfigError", "IdentifierError",
               "SCHEMA", "Cannot write", "OffsetOutOfRange", "data loss", "IllegalArgumentException")
    return any(m in text for m in markers)


def recreated_line(e: BaseException) -> str:
    """The message of a batch's :class:`TopicRecreatedError` out of Spark's wrapped error."""
    text = str(e)
    i = text.find("TopicRecreatedError: ")
    return ((text[i + len("TopicRecreatedError: "):] if i >= 0 else text).strip().splitlines() or [""])[0][:1000]


def fence_line(e: BaseException) -> str:
    """The fence's own message out of a (possibly JVM-wrapped) error."""
    text = str(e)
    i = text.find(FENCE_MARKER)
    return ((text[i:] if i >= 0 else text).strip().splitlines() or [""])[0][:400]


def first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
