"""Fencing: two runs of one pipeline with different checkpoint folders, and a zombie that wakes up,
never land a record twice (every id exactly once, every dead letter once)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import yaml

from icetide.demo.events import create_topic, produce, sample_values
from tests.fixtures.stack import pipeline_dict, start, table_ids, unique, wait_for

FIRST, SECOND = 36_000, 24_000


def _config(kafka, lake: Path, workdir: Path, topic: str, table: str, checkpoint: str) -> Path:  # type: ignore[no-untyped-def]
    raw = pipeline_dict(kafka, lake, workdir, topic, table)
    raw["source"]["max_offsets_per_trigger"] = 5000
    raw["stream"].update({"checkpoint_location": str(workdir / checkpoint), "takeover_after": "6 seconds"})
    path = workdir / f"{checkpoint}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _standing_by(log: Path) -> bool:
    text = log.read_text(errors="replace")
    return text.rfind("Standing by") > text.rfind("taking over")


def test_two_runs_and_a_zombie_land_every_record_once(kafka, spark, lake, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic, table = unique("fence"), f"it.{unique('fence')}"
    create_topic(kafka.bootstrap, topic, 4)
    first = produce(kafka.bootstrap, topic, sample_values(FIRST, bad_every=1000, seed=11), partitions=4)
    cfg_a = _config(kafka, lake, tmp_path, topic, table, "ckpt_a")
    cfg_b = _config(kafka, lake, tmp_path, topic, table, "ckpt_b")
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"

    # 1) both start at once, each with its own checkpoint: one is fenced out and stands by
    a, b = start(cfg_a, log_a), start(cfg_b, log_b)
    deadline = time.monotonic() + 300
    while not (_standing_by(log_a) or _standing_by(log_b)):
        both = log_a.read_text()[-3000:] + log_b.read_text()[-3000:]
        assert time.monotonic() < deadline, "no run was fenced:\n" + both
        assert a.poll() is None and b.poll() is None, "a run exited:\n" + both
        time.sleep(0.5)

    # 2) the writer pauses (a zombie); the standby takes over while more records arrive
    writer, writer_log, standby_log = (b, log_b, log_a) if _standing_by(log_a) else (a, log_a, log_b)
    pos = standby_log.stat().st_size  # before the pause: the takeover may come while the records are produced
    os.killpg(writer.pid, signal.SIGSTOP)
    second = produce(kafka.bootstrap, topic, sample_values(SECOND, bad_every=1000, seed=12, first_id=FIRST),
                     partitions=4)
    wait_for(standby_log, "taking over", pos, timeout=120)
    # a batch that wrote rows into the table, not one that only found records the writer had already
    # committed (a writer paused between its table and dead-letter commits leaves such a batch first,
    # and then the zombie has nothing the new owner committed to be fenced by)
    wait_for(standby_log, r'"event": "batch", [^\n]*"written": \{"it\.', pos, timeout=240)

    # 3) the zombie wakes up: its next commit is fenced, nothing of it lands
    pos = writer_log.stat().st_size
    os.killpg(writer.pid, signal.SIGCONT)
    wait_for(writer_log, "fenced:", pos, timeout=240)

    # 4) both stop on SIGTERM (exit 0); one more run, from the first checkpoint, to idle
    for p in (a, b):
        os.killpg(p.pid, signal.SIGTERM)
    assert a.wait(300) == 0, log_a.read_text()[-3000:]
    assert b.wait(300) == 0, log_b.read_text()[-3000:]
    final = start(cfg_a, tmp_path / "final.log", "--until-idle", "--for", "600")
    assert final.wait(700) == 0, (tmp_path / "final.log").read_text()[-3000:]

    ids = table_ids(spark, table)
    want = set(first.ids) | set(second.ids)
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicate rows"
    assert set(ids) == want, f"{len(want - set(ids))} ids missing"
    dead = spark.sql(f"SELECT _kafka_partition, _kafka_offset FROM icetide.{table}_dlq").collect()
    assert len(dead) == len({(r[0], r[1]) for r in dead}) == first.bad + second.bad
