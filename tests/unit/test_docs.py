"""The docs users read stay true to the code."""

from __future__ import annotations

import re
from pathlib import Path

from icetide.config.reference import render

REPO = Path(__file__).resolve().parents[2]


def test_config_reference_is_current() -> None:
    committed = (REPO / "docs" / "config.md").read_text()
    assert committed.strip() == render().strip(), "regenerate: python -m icetide.config.reference > docs/config.md"


def test_readme_commands_exist() -> None:
    readme = (REPO / "README.md").read_text()
    for script in re.findall(r"^(scripts/\S+\.sh)", readme, re.M):
        assert (REPO / script).is_file(), script
    ci = (REPO / ".ci" / "run").read_text()
    test_cmd = re.search(r"^(scripts/test\.sh)\s*$", readme, re.M)
    assert test_cmd is not None and test_cmd.group(1) in ci


def test_pyspark_pin_matches_pom() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    pom = (REPO / "src" / "icetide" / "jvm" / "pom.xml").read_text()
    spark = re.search(r"<spark.version>([^<]+)</spark.version>", pom)
    assert spark is not None and f'"pyspark=={spark.group(1)}"' in pyproject
