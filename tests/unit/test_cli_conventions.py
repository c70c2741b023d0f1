"""CLI conventions that need no services: where the config is found, LSB exit codes."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from icetide.app.output import handle_errors
from icetide.cli.main import cli
from tests.fixtures.configs import BASE, write


def test_no_config_anywhere_says_the_three_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ICETIDE_CONFIG", raising=False)
    res = CliRunner().invoke(cli, ["check"])
    assert res.exit_code == 2
    assert ("no pipeline config: pass -c FILE, set ICETIDE_CONFIG, or put icetide.yaml in the current folder"
            in res.output)


@pytest.mark.parametrize("where", ["env", "cwd"])
def test_config_found_without_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    path = write(tmp_path, {**BASE, "sink": 1})  # a mistake, so the message shows which file was read
    monkeypatch.delenv("ICETIDE_CONFIG", raising=False)
    if where == "env":
        monkeypatch.setenv("ICETIDE_CONFIG", str(path))
        monkeypatch.chdir(tmp_path.parent)
        shown = str(path)
    else:
        path.rename(tmp_path / "icetide.yaml")
        monkeypatch.chdir(tmp_path)
        shown = "icetide.yaml"
    res = CliRunner().invoke(cli, ["check"])
    assert res.exit_code == 2
    assert f"icetide: {shown}: unknown key 'sink'" in res.output


def test_kafka_status_not_running_is_lsb_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICETIDE_HOME", str(tmp_path))
    res = CliRunner().invoke(cli, ["kafka", "status", "--port", "1"])
    assert (res.exit_code, res.output.strip()) == (3, "not running")


def _failing(exc: Exception) -> click.Command:
    @click.command()
    @handle_errors
    def boom() -> None:
        raise exc

    return boom


def test_an_unexpected_error_is_one_line_and_exit_1_with_the_trace_only_when_verbose() -> None:
    res = CliRunner().invoke(_failing(RuntimeError("the disk is full\nsecond line")), [])
    assert res.exit_code == 1
    assert res.output.strip() == "icetide: RuntimeError: the disk is full (icetide -v shows the trace)"


def test_a_jvm_error_shows_the_java_message_not_the_py4j_call() -> None:
    text = ("An error occurred while calling o123.sql.\n: org.apache.iceberg.exceptions.NoSuchTableException: "
            "Table does not exist: raw.x\n\tat org.apache.iceberg...")
    res = CliRunner().invoke(_failing(RuntimeError(text)), [])
    assert res.output.strip() == ("icetide: RuntimeError: org.apache.iceberg.exceptions.NoSuchTableException: "
                                  "Table does not exist: raw.x (icetide -v shows the trace)")
