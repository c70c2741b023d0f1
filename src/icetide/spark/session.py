"""One function that builds the SparkSession from config: jars, Iceberg extensions, catalog, master.

The same code runs under ``spark-submit`` on a cluster: set ``spark.master: null`` (the master then
comes from spark-submit) and ``spark.jars: none`` when the cluster image ships the jars, or
``packages`` to let Spark resolve them through Ivy (``spark.jars.packages``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icetide import jvm, paths, secrets
from icetide.catalog import check_reachable, spark_catalog_conf
from icetide.catalog.jdbc import Purpose
from icetide.config.models import PipelineConfig
from icetide.errors import SetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
LOCAL_FS = "io.icetide.hadoop.NioLocalFileSystem"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def pinned_versions() -> dict[str, str]:
    """Versions pinned in the shipped pom (the single source of truth)."""
    root = ET.parse(jvm.POM).getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = root.find("m:properties", ns)
    assert props is not None
    return {el.tag.split("}")[1]: (el.text or "") for el in props}


def maven_packages() -> str:
    v = pinned_versions()
    scala = v["scala.binary"]
    return ",".join([
        f"org.apache.iceberg:iceberg-spark-runtime-4.1_{scala}:{v['iceberg.version']}",
        f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{v['spark.version']}",
        f"org.apache.spark:spark-avro_{scala}:{v['spark.version']}",
        f"org.xerial:sqlite-jdbc:{v['sqlite.version']}",
        f"org.apache.iceberg:iceberg-aws-bundle:{v['iceberg.version']}",
        f"com.google.protobuf:protobuf-java:{v['protobuf.version']}",
    ])


def local_jars() -> list[Path]:
    """Fetched jars minus artifacts pyspark already ships (hadoop-client, scala-library, …)."""
    import pyspark

    shipped = {jvm.artifact_name(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in jvm.jars("spark") if jvm.artifact_name(j) not in shipped]


def icetide_jar() -> list[Path]:
    """icetide's JVM classes (built on first use); empty, with a warning, when no JDK can build them.

    Without them ingest still works: every table is then written by its own Spark job.
    """
    try:
        return [jvm.build()]
    except SetupError as e:
        log.warning("writing each table in its own Spark job: %s", e)
        return []


def _iceberg_jar(own: list[Path]) -> list[Path]:
    """icetide's classes that must share a class loader with ``spark.jars``, built with :func:`icetide_jar`:
    the Iceberg-facing ones (the scan telemetry reporter) and the Protobuf decoder (over protobuf-java)."""
    return [j for j in (jvm.iceberg_jar(), jvm.protobuf_jar()) if own and j.exists()]


#: ``console`` (what ``icetide -v`` sets) leaves Spark's own log lines on the terminal
LOG_ENV = "ICETIDE_SPARK_LOG"


def spark_log_file() -> Path | None:
    """Where the driver's Spark/Iceberg log lines go instead of the terminal (None: to the terminal)."""
    if os.environ.get(LOG_ENV) == "console":
        return None
    return paths.home() / "logs" / "spark.log"


def _log_options(conf: dict[str, str]) -> None:
    """Send the driver JVM's log4j output to :func:`spark_log_file` (a user's log4j setting wins)."""
    log_file = spark_log_file()
    opts = conf.get("spark.driver.extraJavaOptions", "")
    if log_file is None or "log4j2.configurationFile" in opts:
        return
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        props = log_file.parent / "log4j2-spark.properties"
        # written aside, then renamed: a JVM starting at the same moment (another pipeline, a test
        # worker) reads the old file or the new one, never half of it
        tmp = props.with_name(f".{props.name}.{os.getpid()}")
        tmp.write_text(jvm.log4j2_properties(log_file))
        os.replace(tmp, props)
    except OSError as e:
        log.warning("Spark's log stays on the terminal: cannot write %s (%s)", log_file.parent, e.strerror)
        return
    conf["spark.driver.extraJavaOptions"] = f"{opts} -Dlog4j2.configurationFile={props.as_uri()}".strip()
    log.info("Spark's own log lines go to %s (icetide -v shows them here)", log_file)


def session_conf(cfg: PipelineConfig) -> dict[str, str]:
    conf: dict[str, str] = {
        "spark.sql.extensions": EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        "spark.scheduler.mode": "FAIR",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.metricsEnabled": "true",
        # Parsing leaves type-mismatched fields null and flags the record, so it is dead-lettered.
        "spark.sql.json.enablePartialResults": "true",
        # Spark's default misses REST catalog credentials and Kafka JAAS configs: icetide's own list of
        # secret-bearing keys (the one its scrubber uses), plus access key ids and every SASL setting.
        "spark.redaction.regex": f"{secrets.SECRET_KEY_RE.pattern}|access[.-]?key|sasl",
        # PySpark otherwise records the Python call site of every Column function (several JVM
        # round trips and a stack inspection each): ~40% of a fan-out batch's driver time, for
        # error contexts that would only point into icetide's own code.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # A batch icetide caches lives for one batch: choosing each column's compression (dictionary,
        # run-length; Spark's default) cost ~12% of a CDC batch's executor CPU for no read it saves.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
    }
    if cfg.spark.master and cfg.spark.master.startswith("local"):
        conf["spark.sql.shuffle.partitions"] = str(max(2, (os.cpu_count() or 2) * 2))
        conf["spark.driver.memory"] = "4g"
    own: list[Path] = []
    # one JVM: local, local[n], local[n,f] (local-cluster[...] starts executor JVMs, which spark.jars ships to)
    local = cfg.spark.master is not None and (cfg.spark.master == "local" or cfg.spark.master.startswith("local["))
    if cfg.spark.jars == "local":
        own = icetide_jar()
        jars = [*local_jars(), *own, *_iceberg_jar(own)]
        if local:
            # One JVM is driver and executor: the jars go on its own class path. Through spark.jars
            # the local executor copies every jar (~130 MB) into a fresh /tmp/spark-*/userFiles-*
            # on each start, and a JVM that is killed (SIGKILL, OOM) never removes it: a pipeline
            # restarted by a supervisor filled the disk. A user's class path entries follow ours.
            conf["spark.driver.extraClassPath"] = os.pathsep.join(str(j) for j in jars)
        else:
            conf["spark.jars"] = ",".join(str(j) for j in jars)
    elif cfg.spark.jars == "packages":
        conf["spark.jars.packages"] = maven_packages()
        if own := icetide_jar():
            conf["spark.jars"] = ",".join(str(j) for j in [*own, *_iceberg_jar(own)])
    if own and local:
        # Local files (a local warehouse, checkpoints) without a forked `chmod` and a .crc sidecar
        # per file created: see NioLocalFileSystem.java. Only file://, only in local mode (the
        # class must be on the JVM's own classpath: spark-submit reads files before spark.jars
        # is loaded); a user's setting wins.
        if "spark.driver.extraClassPath" not in conf:
            conf["spark.driver.extraClassPath"] = str(own[0])
        conf["spark.hadoop.fs.file.impl"] = LOCAL_FS
    conf.update(spark_catalog_conf(cfg))
    user = dict(cfg.spark.conf)
    if "spark.jars" in user and "spark.jars" in conf:  # a user's jars (a JDBC driver) join icetide's
        user["spark.jars"] = f"{conf['spark.jars']},{user['spark.jars']}"
    if "spark.driver.extraClassPath" in user and "spark.driver.extraClassPath" in conf:
        user["spark.driver.extraClassPath"] = os.pathsep.join(
            [conf["spark.driver.extraClassPath"], user["spark.driver.extraClassPath"]])
    conf.update(user)
    _log_options(conf)
    return conf


#: The one line the JVM prints on every start because Spark's launcher adds an incubator module
_INCUBATOR = b"WARNING: Using incubator modules:"


def _quiet_jvm_start() -> None:
    """Leave the JVM's incubator-module warning off the terminal; every other line of its stderr
    passes through. Not with ``icetide -v`` (Spark logs to the terminal then: nothing is filtered)."""
    import pyspark.core.context as context
    from pyspark import java_gateway

    if spark_log_file() is None or getattr(context.launch_gateway, "icetide", False):  # type: ignore[attr-defined]
        return
    original = java_gateway.launch_gateway

    def forward(stream: Any) -> None:
        for line in iter(stream.readline, b""):
            if not line.startswith(_INCUBATOR):
                sys.stderr.buffer.write(line)
                sys.stderr.flush()

    def launch(conf: Any = None, popen_kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = {"stderr": subprocess.PIPE, **(popen_kwargs or {})}
        gateway = original(conf, kwargs)
        proc = getattr(gateway, "proc", None)
        if proc is not None and proc.stderr is not None:
            threading.Thread(target=forward, args=(proc.stderr,), name="icetide-jvm-stderr", daemon=True).start()
        return gateway

    launch.icetide = True  # type: ignore[attr-defined]
    context.launch_gateway = launch  # type: ignore[attr-defined]


def build_session(cfg: PipelineConfig, purpose: Purpose = "write") -> SparkSession:
    """The pipeline's SparkSession; ``purpose`` read: the catalog must exist already (nothing is created)."""
    from pyspark.sql import SparkSession

    check_reachable(cfg, purpose)
    _quiet_jvm_start()
    builder = SparkSession.builder.appName(cfg.spark.app_name or f"icetide-{cfg.name}")
    if cfg.spark.master:
        builder = builder.master(cfg.spark.master)
    for k, v in session_conf(cfg).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("ICETIDE_SPARK_LOG_LEVEL", "WARN"))
    if cfg.catalog.type == "jdbc":
        _open_jdbc_catalog(spark, cfg.catalog.name)
    return spark


# Iceberg's JDBC catalog creates and migrates its own SQL tables on first use; two processes doing it
# at once (`icetide run` and `icetide maintain` started together on a new catalog) can lose the race
# with these. Spark keeps a catalog only once it loaded, so trying again is safe.
_SCHEMA_RACE = ("duplicate column name", "already exists", "Cannot check and eventually update SQL schema")


def _open_jdbc_catalog(spark: SparkSession, catalog: str, attempts: int = 3) -> None:
    for i in range(attempts):
        try:
            spark.sql(f"SHOW NAMESPACES IN {catalog}").collect()
            return
        except Exception as e:
            if i == attempts - 1 or not any(m in str(e) for m in _SCHEMA_RACE):
                raise
            log.warning("catalog %s: its SQL schema was being created by another process; trying again", catalog)
            time.sleep(1 + i)


def has_class(spark: SparkSession, name: str) -> bool:
    """Whether the JVM class ``name`` is on the session's classpath (e.g. icetide's own jar)."""
    jvm = spark._jvm
    assert jvm is not None
    try:
        jvm.java.lang.Class.forName(name, False, jvm.java.lang.Thread.currentThread().getContextClassLoader())
    except Exception:
        return False
    return True
