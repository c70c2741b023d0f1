"""Bad config through the CLI: one line naming the key, exit code 2 (as a subprocess)."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.configs import BASE, write
from tests.fixtures.stack import icetide_cli


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


