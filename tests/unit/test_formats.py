"""The format seam without a JVM: the registry of formats against the config's values, their
dead-letter classes against the ones the dead-letter table documents, and which formats a pipeline
reads and how they combine."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from icetide.config.source import KafkaSource, ValueFormatName
from icetide.ingest import decode
from icetide.ingest.formats import FORMATS, Formats
from icetide.ingest.formats.avro import AvroFormat
from icetide.ingest.formats.base import ValueFormat
from icetide.ingest.formats.json import JsonFormat

REGISTRY = {"url": "http://127.0.0.1:9"}


def _source(**kw: Any) -> KafkaSource:
    return KafkaSource.model_validate({"bootstrap_servers": "127.0.0.1:9", "topics": ["a", "b"], **kw})


def test_every_config_format_has_one_module_and_every_module_a_config_value() -> None:
    assert sorted(FORMATS) == sorted(get_args(ValueFormatName))
    for name, cls in FORMATS.items():
        assert issubclass(cls, ValueFormat) and cls.name == name


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_formats_dead_letter_classes_are_documented_ones(name: str) -> None:
    classes = FORMATS[name].error_classes
    assert classes, f"{name} names no dead-letter class"
    assert set(classes) <= set(decode.ERROR_CLASSES), set(classes) - set(decode.ERROR_CLASSES)


def test_one_json_source_reads_one_format_typed_by_inference() -> None:
    f = Formats(_source())
    assert list(f.values) == ["json"] and isinstance(f.values["json"], JsonFormat)
    assert not f.mixed and f.infers and not f.envelopes and f.avro is None


def test_avro_values_declare_types_and_decode_envelopes() -> None:
    f = Formats(_source(format="avro", schema_registry=REGISTRY))
    assert list(f.values) == ["avro"] and f.avro is f.values["avro"]
    assert not f.mixed and not f.infers and f.envelopes


def test_formats_by_topic_are_mixed_and_each_built_once() -> None:
    f = Formats(_source(format="json", topic_formats={"b": "avro"}, schema_registry=REGISTRY))
    assert sorted(f.values) == ["avro", "json"] and f.mixed
    assert f.infers  # the JSON topic's tables are inferred
    assert not f.envelopes  # a JSON change is unwrapped from its text, so not every format decodes envelopes
    assert f.avro is f.values["avro"]  # the keys and the registry hook share the values' format and client


def test_avro_keys_under_json_values_get_a_registry_format_of_their_own() -> None:
    f = Formats(_source(key_format="avro", schema_registry=REGISTRY))
    assert list(f.values) == ["json"] and not f.mixed
    assert isinstance(f.avro, AvroFormat) and f.avro_keys
    assert not f.envelopes  # a CDC table's JSON changes are unwrapped from the text, not decoded as Avro
