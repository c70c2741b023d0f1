"""Where the SparkSession's jars go: a local JVM takes them on its class path (no per-start copy)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from icetide.config import load_config
from icetide.spark import session
from tests.fixtures.configs import BASE, write


def _conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, master: str, extra: dict[str, str]) -> dict[str, str]:
    jars = [tmp_path / n for n in ("iceberg-spark-runtime.jar", "kafka-clients.jar")]
    own = tmp_path / "icetide-jvm.jar"
    monkeypatch.setenv("ICETIDE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(session, "local_jars", lambda: jars)
    monkeypatch.setattr(session, "icetide_jar", lambda: [own])
    monkeypatch.setattr(session, "_iceberg_jar", lambda o: [tmp_path / "icetide-iceberg.jar"])
    spark = {**BASE.get("spark", {}), "master": master, "conf": extra}
    return session.session_conf(load_config(write(tmp_path, {**BASE, "spark": spark})))


def test_local_mode_puts_every_jar_on_the_class_path_and_none_in_spark_jars(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = _conf(tmp_path, monkeypatch, "local[2]", {})
    assert "spark.jars" not in conf  # through spark.jars each start copies ~130 MB into /tmp/spark-*
    names = [Path(p).name for p in conf["spark.driver.extraClassPath"].split(os.pathsep)]
    assert names == ["iceberg-spark-runtime.jar", "kafka-clients.jar", "icetide-jvm.jar", "icetide-iceberg.jar"]
    assert conf["spark.hadoop.fs.file.impl"] == session.LOCAL_FS


def test_a_users_class_path_and_jars_join_icetides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = _conf(tmp_path, monkeypatch, "local[2]",
                 {"spark.driver.extraClassPath": "/opt/driver.jar", "spark.jars": "/opt/udf.jar"})
    entries = conf["spark.driver.extraClassPath"].split(os.pathsep)
    assert entries[-1] == "/opt/driver.jar" and Path(entries[0]).name == "iceberg-spark-runtime.jar"
    assert conf["spark.jars"] == "/opt/udf.jar"


@pytest.mark.parametrize("master", ["spark://10.0.0.1:7077", "local-cluster[2,1,1024]"])
def test_a_cluster_master_gets_the_jars_shipped_through_spark_jars(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, master: str) -> None:
    """local-cluster starts executor JVMs of their own: only spark.jars reaches them."""
    conf = _conf(tmp_path, monkeypatch, master, {})
    assert [Path(p).name for p in conf["spark.jars"].split(",")] == [
        "iceberg-spark-runtime.jar", "kafka-clients.jar", "icetide-jvm.jar", "icetide-iceberg.jar"]
    assert "spark.driver.extraClassPath" not in conf


def test_the_batch_caches_are_not_compressed_unless_the_user_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """A cache lives for one batch: choosing each column's compression cost ~12% of a CDC batch's CPU."""
    key = "spark.sql.inMemoryColumnarStorage.compressed"
    assert _conf(tmp_path, monkeypatch, "local[2]", {})[key] == "false"
    assert _conf(tmp_path, monkeypatch, "local[2]", {key: "true"})[key] == "true"
