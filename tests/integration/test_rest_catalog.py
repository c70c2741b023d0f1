"""The production path: the same pipeline against a real Iceberg REST catalog server."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from icetide.demo.events import create_topic, produce, sample_values
from icetide.services.rest_catalog import LocalRestCatalog
from tests.fixtures.stack import free_port_pair, icetide_cli, pipeline_dict, unique


@pytest.fixture(scope="module")
def rest_catalog() -> Iterator[LocalRestCatalog]:
    server = LocalRestCatalog(port=free_port_pair())
    server.reset()
    server.start()
    yield server
    server.reset()


def table_metadata(server: LocalRestCatalog, namespace: str, table: str) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(f"{server.uri}/v1/namespaces/{namespace}/tables/{table}", timeout=30) as r:
        return json.load(r)["metadata"]  # type: ignore[no-any-return]


def test_pipeline_on_rest_catalog(kafka, lake, rest_catalog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic, name = unique("rest"), unique("events")
    create_topic(kafka.bootstrap, topic, 2)
    produced = produce(kafka.bootstrap, topic, sample_values(5000, bad_every=100), partitions=2)
    cfg = pipeline_dict(kafka, lake, tmp_path, topic, f"restns.{name}",
                        catalog={"type": "rest", "uri": rest_catalog.uri, "name": "icetide"})
    path = tmp_path / "rest.yaml"
    path.write_text(yaml.safe_dump(cfg))

    res = icetide_cli("run", "-c", str(path), "--until-idle", "--for", "300", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"{produced.good} written, {produced.bad} dead-lettered" in res.stdout

    # Check through the REST API itself, not through icetide.
    meta = table_metadata(rest_catalog, "restns", name)
    current = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])
    assert int(current["summary"]["total-records"]) == produced.good
    assert current["summary"]["icetide.pipeline"] == cfg["name"]
    assert meta["properties"][f"icetide.watermark.{cfg['name']}"]
    dlq = table_metadata(rest_catalog, "restns", f"{name}_dlq")
    dlq_current = next(s for s in dlq["snapshots"] if s["snapshot-id"] == dlq["current-snapshot-id"])
    assert int(dlq_current["summary"]["total-records"]) == produced.bad

    # A second run over the same topic adds nothing (exactly-once via the checkpoint + ledger).
    res = icetide_cli("run", "-c", str(path), "--until-idle", "--for", "120", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    meta = table_metadata(rest_catalog, "restns", name)
    current = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])
    assert int(current["summary"]["total-records"]) == produced.good

    out = icetide_cli("offsets", "-c", str(path), "--output", "json", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    held = json.loads(out.stdout)[f"icetide.restns.{name}"]["next_offsets"][topic]
    assert held == {"0": 2500, "1": 2500}
