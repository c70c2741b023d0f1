"""``icetide submit``: the ``spark-submit`` command line that runs ``icetide run`` on a cluster.

Under ``spark-submit`` the driver JVM starts before any Python runs, so jars set from Python
(``spark.jars`` in the session builder) reach the executors but not the driver's own class
loader: they must be on the command line (``--jars``), which is what this builds. Executors run
only JVM code (Iceberg, Spark's Kafka source, icetide's jar), so in client mode no Python has
to be shipped to them; the driver is this Python (``spark.pyspark.driver.python``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import icetide
from icetide.config.models import PipelineConfig
from icetide.errors import ConfigError

#: the CLI's entry module, run by spark-submit as the driver's Python file
DRIVER = Path(icetide.__file__).parent / "cli" / "main.py"


def spark_submit() -> Path:
    from icetide.services.spark_cluster import spark_home

    return spark_home() / "bin" / "spark-submit"


def submit_command(cfg: PipelineConfig, config_path: Path, run_args: list[str]) -> list[str]:
    """``spark-submit … icetide/cli/main.py run -c <config> <run_args>`` for ``cfg.spark.master``."""
    from icetide.spark.session import _iceberg_jar, icetide_jar, local_jars, maven_packages

    if not cfg.spark.master:
        raise ConfigError("spark.master: set the cluster's master URL (spark://host:7077, yarn, k8s://…) to submit")
    cmd = [str(spark_submit()), "--master", cfg.spark.master, "--deploy-mode", "client",
           "--name", cfg.spark.app_name or f"icetide-{cfg.name}",
           "--conf", f"spark.pyspark.python={sys.executable}",
           "--conf", f"spark.pyspark.driver.python={sys.executable}"]
    own = icetide_jar() if cfg.spark.jars != "none" else []
    if cfg.spark.jars == "local":
        cmd += ["--jars", ",".join(str(j) for j in [*local_jars(), *own, *_iceberg_jar(own)])]
    elif cfg.spark.jars == "packages":
        cmd += ["--packages", maven_packages()]
        if own:
            cmd += ["--jars", ",".join(str(j) for j in [*own, *_iceberg_jar(own)])]
    return [*cmd, str(DRIVER), "run", "-c", str(config_path.resolve()), *run_args]
