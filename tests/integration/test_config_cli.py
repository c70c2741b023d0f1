"""Bad config through the CLI: one line naming the key, exit code 2 (as a subprocess)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from icetide.config import load_config
from icetide.errors import ConfigError
from tests.fixtures.stack import icetide_cli

BASE = {
    "name": "orders",
    "source": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["orders"]},
    "target": {"table": "raw.orders"},
}


def write(tmp_path: Path, data: dict) -> Path:  # type: ignore[type-arg]
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def errors_for(tmp_path: Path, data: dict) -> str:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, data))
    return str(e.value).replace(str(tmp_path / "p.yaml"), "p.yaml")


def test_cli_unreachable_kafka_is_one_line_and_exit_2(tmp_path: Path) -> None:
    data = {**BASE, "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ["orders"]}}
    res = icetide_cli("check", "-c", str(write(tmp_path, data)), timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("icetide: source.bootstrap_servers: cannot reach Kafka at 127.0.0.1:1 ("), res.stderr


def test_cli_unreachable_rest_catalog(tmp_path: Path) -> None:
    data = {**BASE, "catalog": {"type": "rest", "uri": "http://127.0.0.1:1/api"}}
    res = icetide_cli("run", "-c", str(write(tmp_path, data)), timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].startswith(
        "icetide: catalog.uri: cannot reach the REST catalog at http://127.0.0.1:1/api ("
    ), res.stderr


def test_cli_config_error_exit_2(tmp_path: Path) -> None:
    res = icetide_cli("run", "-c", str(write(tmp_path, {**BASE, "sink": 1})), timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("icetide: ") and "unknown key 'sink'" in res.stderr


def test_cli_missing_file(tmp_path: Path) -> None:
    res = icetide_cli("run", "-c", str(tmp_path / "nope.yaml"), timeout=60)
    assert res.returncode == 2
    missing = tmp_path / "nope.yaml"
    assert res.stderr.strip() == f"icetide: {missing}: config file not found (pass the path with -c/--config)"


