"""Secrets in config are registered at load time and masked wherever icetide emits text."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from icetide import secrets
from icetide.config import load_config

pytestmark = pytest.mark.unit
CANARY = "cAnArY-7f3e9b1d"


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    secrets.forget_all()
    yield
    secrets.forget_all()


def _config(tmp_path: Path) -> Path:
    data = {
        "name": "orders",
        "source": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["orders"],
                   "options": {"security.protocol": "SASL_SSL",
                               "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                   f'required username="svc" password="{CANARY}-jaas";',
                               "ssl.truststore.password": "${TRUST_PW}"}},
        "catalog": {"type": "rest", "uri": "https://catalog.example.com", "credential": f"client:{CANARY}-oauth",
                    "properties": {"s3.secret-access-key": f"{CANARY}-s3", "s3.access-key-id": "AKIAEXAMPLE",
                                   "header.X-Proxy": f"http://proxyuser:{CANARY}-uri@proxy:3128"}},
        "target": {"table": "sales.orders"},
        "health": {"webhook_url": f"https://hooks.example.com/services/T0/B0/{CANARY}-hook"},
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_loading_a_config_registers_every_secret_it_holds(tmp_path: Path) -> None:
    load_config(_config(tmp_path), env={"TRUST_PW": f"{CANARY}-env"})
    text = (f"jaas {CANARY}-jaas oauth client:{CANARY}-oauth s3 {CANARY}-s3 uri {CANARY}-uri "
            f"hook https://hooks.example.com/services/T0/B0/{CANARY}-hook env {CANARY}-env")
    clean = secrets.scrub(text)
    assert CANARY not in clean, clean
    assert secrets.scrub("key AKIAEXAMPLE") == "key AKIAEXAMPLE"  # an access key id is not a secret
    assert secrets.scrub("nothing secret here") == "nothing secret here"


def test_scrub_masks_unregistered_url_passwords_and_quoted_forms() -> None:
    assert secrets.scrub("jdbc at postgresql://app:hunter22@db:5432/x") == "jdbc at postgresql://app:***@db:5432/x"
    secrets.register("s3cr3t/with+chars")
    assert secrets.scrub("sent s3cr3t%2Fwith%2Bchars") == "sent ***"
    secrets.register("abc")  # too short to track: would mask ordinary text
    assert secrets.scrub("abc def") == "abc def"


def test_log_records_and_their_exceptions_are_scrubbed() -> None:
    secrets.register(CANARY)
    buf = io.StringIO()
    logger = logging.getLogger("icetide.test.secrets")
    logger.propagate = False
    handler = logging.StreamHandler(buf)
    logger.addHandler(handler)
    secrets.install_log_filter(logger)
    try:
        logger.warning("options %s", {"sasl.jaas.config": f'password="{CANARY}"'})
        try:
            raise RuntimeError(f"connect failed with {CANARY}")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    out = buf.getvalue()
    assert "options" in out and "RuntimeError" in out
    assert CANARY not in out, out


def test_redact_mapping_and_safe_url() -> None:
    opts = {"sasl.jaas.config": "x", "security.protocol": "SASL_SSL", "ssl.keystore.password": "pw12345"}
    assert secrets.redact_mapping(opts) == {"sasl.jaas.config": "***", "security.protocol": "SASL_SSL",
                                            "ssl.keystore.password": "***"}
    assert secrets.safe_url("https://hooks.example.com/services/T0/B0/tok") == "https://hooks.example.com/***"
    assert secrets.safe_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert json.loads(json.dumps(secrets.redact_mapping({"token": ""}))) == {"token": ""}


def test_secret_looking_environment_variables_are_registered() -> None:
    secrets.register_environment({"AWS_SECRET_ACCESS_KEY": f"{CANARY}-aws", "HOME": "/root",
                                  "DB_PASSWORD": "pw-123456"})
    assert secrets.scrub(f"{CANARY}-aws pw-123456 /root") == "*** *** /root"


def test_item14_secrets_in_the_maintenance_log_are_scrubbed() -> None:
    """#31 item 14: a procedure's error (and its result) that quotes a credential reaches the action
    log table masked, whichever path recorded it (a plan's step, retention's housekeeping)."""
    from icetide.config.policy import StepName
    from icetide.maintenance.executor import ActionRecord, log_rows
    from icetide.maintenance.planner import Step

    secrets.register(f"{CANARY}-s3")
    err = RuntimeError(f"S3 403 for s3://bucket/t?X-Amz-Credential={CANARY}-s3 via http://u:{CANARY}-pw@proxy:3128\n"
                       "second line")
    line = secrets.error_line(err)
    assert CANARY not in line and "second line" not in line and "S3 403" in line
    rec = ActionRecord("icetide.db.t", StepName.EXPIRE_SNAPSHOTS, "failed", 0, error=f"raw {CANARY}-s3",
                       result=[{"echo": f"key={CANARY}-s3"}])
    step = Step("icetide.db.t", StepName.EXPIRE_SNAPSHOTS, f"reason {CANARY}-s3", {}, "x")
    (row,) = log_rows([(step, rec)])
    assert all(CANARY not in str(v) for v in row.values()), row
    assert "raw" in row["error"] and "echo" in row["result"]


def test_the_maintenance_log_masks_secrets_json_escapes_and_never_keeps_half_of_one() -> None:
    """#41 (8): a secret with characters JSON escapes (a quote, a backslash, non-ASCII) is masked in
    the action log's JSON columns, and a result cut to its size limit is cut after masking, so the
    cut cannot leave the start of a secret behind."""
    from icetide.maintenance.executor import LOG_SCHEMA, ActionRecord, log_rows
    from icetide.maintenance.planner import Step

    secret = 'pa"ss\\wörd-' + CANARY
    secrets.register(secret)
    step = Step(table="db.t", action="rewrite_data_files", reason=f"uri with {secret}", figures={},
                expected="", args={"where": f"x = '{secret}'"})
    # `[{"pad": "` + pad + `", "error": "` puts the escaped secret at 99,983..100,016: across the cut
    near_limit = [{"pad": "x" * (100_000 - 40), "error": secret}]
    record = ActionRecord(table="db.t", step="rewrite_data_files", outcome="failed", started_at_ms=0,
                          result=near_limit, error=f"failed: {secret}")
    [row] = log_rows([(step, record)])
    assert set(row) == set(LOG_SCHEMA.fieldNames())
    for column in ("reason", "arguments", "result", "error"):
        text = row[column]
        assert CANARY not in text and "pa\\\"ss" not in text and "pa\"ss" not in text, (column, text[-200:])
    assert secrets.MASK in row["arguments"] and len(row["result"]) <= 100_000
    assert not row["result"].endswith(('pa\\"', "pa\\", "pa")), row["result"][-40:]


def test_a_webhook_path_of_one_word_masks_no_ordinary_text() -> None:
    """CI stop 47: a webhook at ``/hook`` registered "hook" as a secret, so "alert webhook failed"
    was logged as "alert web*** failed" for the rest of the process."""
    secrets.register_url("http://127.0.0.1:9000/hook")
    secrets.register_url("https://alerts.example.com/alerts?token=" + CANARY)
    assert secrets.scrub("alert webhook failed; 3 alerts") == "alert webhook failed; 3 alerts"
    assert CANARY not in secrets.scrub(f"posted token={CANARY}")
    secrets.register_url(f"https://hooks.example.com/services/T0/B0/{CANARY}x")
    assert secrets.scrub(f"path services/T0/B0/{CANARY}x or {CANARY}x") == "path *** or ***"
