"""A canary secret in every secret-bearing setting (Kafka JAAS, catalog password and credential, S3
key, a webhook URL's user info and token path), passed as ${VAR}: it must appear in none of the
outputs a run produces: the CLI's output and logs, Spark's driver log, the Spark UI's environment
page, icetide's tables, the HTML report, every --output json, a config error."""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.request
import uuid

import yaml

from icetide import paths
from icetide.demo.events import create_topic, produce, sample_values
from icetide.services.process import free_port
from tests.fixtures.stack import icetide_cli, pipeline_dict, start, unique

CANARY = f"canary{uuid.uuid4().hex[:16]}"
VAR = "${ICETIDE_TEST_CANARY}"


def _ui_environment(port: int, app_name: str, timeout: float = 180) -> str:
    """The Spark UI's environment page (JSON) of the running application named ``app_name``, on
    ``port`` or, when another process took that port first, one of the next 16 Spark tries."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in range(port, port + 17):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{p}/api/v1/applications", timeout=1) as r:
                    apps = [a["id"] for a in json.load(r) if a.get("name") == app_name]
                if not apps:
                    continue
                with urllib.request.urlopen(f"http://127.0.0.1:{p}/api/v1/applications/{apps[0]}/environment",
                                            timeout=5) as r:
                    return r.read().decode()
            except (OSError, http.client.HTTPException, IndexError, ValueError, KeyError, TypeError, AttributeError):
                # another service on a probed port (a broker answers HTTP with bytes: BadStatusLine)
                continue
        time.sleep(0.5)
    raise AssertionError(f"no Spark UI of {app_name} on ports {port}-{port + 16}")


def test_a_canary_secret_appears_in_no_output(kafka, spark, lake, tmp_path, registry) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    (home / "jars").symlink_to(paths.home() / "jars")  # the fetched jars; logs go to this test's home
    env = {**os.environ, "ICETIDE_HOME": str(home), "ICETIDE_TEST_CANARY": CANARY}
    topic, table = unique("sec"), f"it.{unique('sec')}"
    ns = table.split(".")[0]
    create_topic(kafka.bootstrap, topic, 2)
    produce(kafka.bootstrap, topic, sample_values(3000, bad_every=100), partitions=2)
    ui_port, closed = free_port(), free_port()
    cfg = pipeline_dict(kafka, lake, tmp_path, topic, table)
    cfg["source"]["options"] = {"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                                                    f'required username="svc" password="{VAR}";'}
    cfg["catalog"]["password"] = VAR
    cfg["catalog"]["properties"] = {"s3.secret-access-key": VAR, "credential": f"client:{VAR}"}
    # a schema registry with basic auth (an Avro topic beside the JSON one: both formats in one run)
    cfg["source"]["topic_formats"] = {f"{topic}-avro": "avro"}
    cfg["source"]["schema_registry"] = {"url": registry.url, "basic_auth_user_info": f"svc:{VAR}"}
    cfg["health"] = {"namespaces": [ns], "history_table": f"{ns}.health_{table.split('.')[1]}",
                     "webhook_url": f"http://alerts:{VAR}@127.0.0.1:{closed}/hooks/{VAR}",
                     "thresholds": {"snapshots_warning": 1, "partition_files_warning": 1}}
    cfg["stream"]["batch_log_table"] = f"{table}_batches"
    cfg["spark"]["conf"].update({"spark.ui.enabled": "true", "spark.ui.port": str(ui_port)})
    path = tmp_path / "secret.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert CANARY not in path.read_text()  # the config file itself holds only ${VAR}
    outputs: dict[str, str] = {}

    log = tmp_path / "run.log"
    saved = dict(os.environ)
    os.environ.update(ICETIDE_HOME=str(home), ICETIDE_TEST_CANARY=CANARY)  # start() passes os.environ on
    try:
        proc = start(path, log, "--until-idle", "--for", "300")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    outputs["spark ui environment"] = _ui_environment(ui_port, f"icetide-{cfg['name']}")
    assert proc.wait(400) == 0, log.read_text()[-3000:]
    outputs["icetide run"] = log.read_text(errors="replace")
    assert "written" in outputs["icetide run"]
    env_page = json.loads(outputs["spark ui environment"])
    spark_props = dict(env_page["sparkProperties"])
    assert spark_props["spark.sql.catalog.icetide.s3.secret-access-key"].startswith("*")  # redacted by key
    assert spark_props["spark.sql.catalog.icetide.jdbc.password"].startswith("*")

    page = tmp_path / "report.html"
    for args in (["status", "-c", str(path)], ["status", "-c", str(path), "-o", "json"],
                 ["health", table, "-c", str(path), "-o", "json"], ["offsets", "-c", str(path), "-o", "json"],
                 ["check", "-c", str(path), "-o", "json"], ["dead-letters", "list", "-c", str(path), "-o", "json"],
                 ["report", "-c", str(path), "--out", str(page)], ["-v", "status", "-c", str(path)]):
        res = icetide_cli(*args, env=env, timeout=300)
        outputs[" ".join(args[:2])] = res.stdout + res.stderr
        assert res.returncode == 0, (args, res.stderr[-2000:])
    assert "alert webhook failed" in outputs["status -c"]  # the webhook was tried (and its URL not shown)
    outputs["report"] = page.read_text()

    bad = yaml.safe_load(path.read_text())
    bad["catalog"]["password"] = [VAR]  # a config error on a secret key
    bad_path = tmp_path / "bad.yaml"
    bad_path.write_text(yaml.safe_dump(bad))
    res = icetide_cli("check", "-c", str(bad_path), env=env)
    assert res.returncode != 0 and "catalog.password" in res.stderr
    outputs["config error"] = res.stdout + res.stderr

    for f in (home / "logs").rglob("*"):
        if f.is_file():
            outputs[f"log {f.name}"] = f.read_text(errors="replace")
    assert any(k.startswith("log spark") for k in outputs), sorted(outputs)
    for t in (table, f"{table}_dlq", f"{table}_batches"):
        outputs[f"table {t}"] = "\n".join(str(r.asDict()) for r in spark.table(f"icetide.{t}").collect())

    leaked = sorted(name for name, text in outputs.items() if CANARY in text)
    assert not leaked, f"the canary appears in: {leaked}"
    assert len(outputs) >= 14, sorted(outputs)
