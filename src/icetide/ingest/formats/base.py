"""The interface every value format implements, and the registry of formats by ``source.format`` name.

A format is one module with one :class:`ValueFormat` subclass, registered under its name with
:func:`register`: :class:`icetide.ingest.formats.Formats` finds it there, so a new format touches
nothing else in ingest (its name joins ``source.format``'s values in :mod:`icetide.config.source`).

The stages of a batch call the methods in this order (``ARCHITECTURE.md``, "The path of one batch"):

1. :meth:`~ValueFormat.with_ids`, then :meth:`~ValueFormat.resolve` on the batch's rows: what later
   stages need per record before anything reads a value (Avro: the schema id, and the batch's new ids
   fetched from the registry);
2. :meth:`~ValueFormat.with_scan`: checks read in one pass over each value (JSON: depth, width, UTF-8
   and the shape fingerprint) into a column later stages read;
3. :meth:`~ValueFormat.verdict`: ``"<class>\\t<message>"`` for a record that must never be parsed;
4. :meth:`~ValueFormat.route_value` and :meth:`~ValueFormat.shape`;
5. :meth:`~ValueFormat.declared`: the table's record type when the format declares one (None: the
   type comes from inference over the values, :mod:`icetide.ingest.evolution`);
6. :meth:`~ValueFormat.parse_columns`: the record as a struct of the table's columns.

Invariants every format keeps: no method reads a record of another format (the composite applies
each column only to its own format's records); a record a format cannot read is a dead letter with
one of :attr:`~ValueFormat.error_classes` and a message, never a row of nulls and never an exception
that fails the batch; the parsed struct's fields are the table's columns, in its order, plus
:data:`OK` and :data:`CORRUPT` when the composite asks for them (``unified``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Self

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from icetide.config.source import KafkaSource
from icetide.config.target import CdcSettings, RouteSettings
from icetide.ingest.decode import CORRUPT, PARSED

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from icetide.ingest.formats.registry import RegistryClient

#: In a unified parsed struct: whether the record decoded (JSON: always true; its failures are in CORRUPT).
OK = "__icetide_ok"


class Parsed(NamedTuple):
    """A format's parse of one table's records: the struct (null for a record it cannot read), the
    dead-letter class (null for a good record) and the message (read only where the class is set)."""

    struct: Column
    error_class: Column
    message: Column


class ValueFormat(ABC):
    """One value format of a pipeline's source. Every method but :meth:`parse_columns` has a neutral
    default: a format implements the stages it takes part in."""

    #: ``source.format``'s value for this format
    name: ClassVar[str]
    #: Every dead-letter class the format's own checks and decoding can give
    error_classes: ClassVar[tuple[str, ...]] = ()
    #: Whether the format declares a table's types (:meth:`declared`); else they are inferred from the values
    declares_types: ClassVar[bool] = False
    #: Whether :meth:`parse_columns` decodes a CDC envelope with the row (else it is unwrapped from the text)
    decodes_envelopes: ClassVar[bool] = False
    #: The columns :meth:`with_scan` adds, dropped once a batch has taken the verdict and the shape
    scan_columns: ClassVar[tuple[str, ...]] = ()

    @classmethod
    @abstractmethod
    def of(cls, source: KafkaSource) -> Self:
        """The format for one pipeline run of ``source`` (it may keep state across batches: schemas seen)."""

    def with_ids(self, rows: DataFrame, mine: Column | None) -> DataFrame:
        """``rows`` with what later stages read per record (``mine``: which records are this format's,
        None when all are)."""
        return rows

    def resolve(self, spark: SparkSession, rows: DataFrame, mine: Column | None) -> None:
        """Learn what the batch needs (new schema ids); ``rows`` carry :meth:`with_ids`' columns."""
        return None

    def registry_client(self) -> RegistryClient | None:
        """The schema-registry client :meth:`resolve` fetches with (None: the format reads no registry);
        a batch of a format with one lists its ids first (:meth:`with_ids`, :meth:`resolve`)."""
        return None

    def text(self) -> Column | None:
        """Per record: its value as JSON text, where the format's values hold one (None: the value
        itself is read as the text, as for JSON)."""
        return None

    def with_scan(self, spark: SparkSession, rows: DataFrame, mine: Column | None) -> DataFrame:
        """``rows`` with a one-pass check of each of this format's values, for :meth:`verdict` and :meth:`shape`."""
        return rows

    def verdict(self, columns: list[str]) -> Column | None:
        """Per record: ``"<class>\\t<message>"`` when it must never be parsed, else null (None: no such check).
        ``columns``: the batch's, so a format reads only what :meth:`with_scan` could add."""
        return None

    def route_value(self, route: RouteSettings) -> Column | None:
        """The routing value for the routes the format decides (None: :mod:`icetide.ingest.routing` reads it)."""
        return None

    def shape(self, columns: list[str]) -> Column | None:
        """Each record's shape fingerprint, so known shapes skip inference (None: the format has none)."""
        return None

    def with_decoded(self, rows: DataFrame) -> DataFrame:
        """``rows`` (one table's) with each of this format's records decoded once into columns
        :meth:`parse_columns` reads; called right before it (default: the parse reads the value itself)."""
        return rows

    def decoded_columns(self) -> list[str]:
        """The columns :meth:`with_decoded` adds (dropped once the parse has read them)."""
        return []

    def declared(self, ids: list[int], cdc: CdcSettings | None = None) -> StructType | None:
        """The record type of a table whose records carry schema ``ids`` (None: inferred from the values)."""
        return None

    def carries(self, parts: tuple[str, ...], cdc: CdcSettings | None) -> Column | None:
        """Per record: whether it has the field at ``parts`` (the table's names, ``element``/``value``
        inside lists and maps), one schema evolution refused, so the record is a dead letter (None:
        read from the record's JSON text)."""
        return None

    @abstractmethod
    def parse_columns(self, spark: SparkSession, schema: StructType, max_value_bytes: int,
                      parsed_name: str = PARSED, cdc: CdcSettings | None = None) -> Parsed:
        """The records as structs of ``schema``'s columns; the error columns read the struct from
        column ``parsed_name``."""

    def unified(self, parsed: Parsed, names: list[str]) -> Column:
        """``parsed``'s struct with :data:`OK` and :data:`CORRUPT` added, so formats side by side in one
        batch give one type (by default: the struct is its own OK, nothing is corrupt)."""
        p = parsed.struct
        return F.when(p.isNotNull(), F.struct(*[p[n].alias(n) for n in names], F.lit(True).alias(OK),
                                              F.lit(None).cast("string").alias(CORRUPT)))


#: ``source.format`` name → the format's class
FORMATS: dict[str, type[ValueFormat]] = {}


def register(cls: type[ValueFormat]) -> type[ValueFormat]:
    """Class decorator: make ``cls`` the format named ``cls.name``."""
    FORMATS[cls.name] = cls
    return cls


def verdict_class(v: Column) -> Column:
    """The class of a verdict (``"<class>\t<message>"``, :meth:`ValueFormat.verdict`)."""
    return F.substring_index(v, "\t", 1)


def verdict_message(v: Column) -> Column:
    return F.substring(v, F.locate("\t", v) + 1, 400)
