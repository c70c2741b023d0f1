"""A chaos run: two pipelines on the real stack under a seeded fault schedule, then exact checks.

    python -m tests.chaos.run --minutes 30 --seed 7 [--record]

Starts its own Kafka broker (KRaft) and a local lake (Iceberg JDBC catalog on SQLite), runs a routed
append pipeline and a Debezium CDC pipeline (each ``icetide run`` in its own process group, in-run
maintenance on), produces records for ``--minutes`` while the faults of
:func:`tests.chaos.schedule.plan` land, then lets both drain to idle and checks (``checks.py``).
Prints every fault and every check with the seed; ``--record`` writes the result to
``tests/chaos/results/``. Exit 0 only when every check is exact.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from icetide.demo.events import create_topic
from icetide.services.kafka import LocalKafka
from tests.chaos import checks
from tests.chaos.schedule import Fault, plan
from tests.chaos.workload import AppendWorkload, CdcWorkload
from tests.fixtures.stack import free_port_pair, start

RESULTS = Path(__file__).with_name("results")
RATE = 100.0  # append records a second


@dataclass
class Pipeline:
    """One pipeline's config and its live processes (the first is the main run)."""

    name: str
    cfg: Path
    workdir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)  # exit codes of runs that ended on their own

    def start(self, cfg: Path | None = None) -> subprocess.Popen[bytes]:
        log = self.workdir / f"run-{len(self.logs)}.log"
        self.logs.append(log)
        proc = start(cfg or self.cfg, log)
        self.procs.append(proc)
        return proc

    @property
    def main(self) -> subprocess.Popen[bytes]:
        return self.procs[0]

    def reap(self) -> None:
        """Runs that ended on their own (a finding: nothing may stop a pipeline) are noted and the
        main run is started again."""
        for p in list(self.procs):
            code = p.poll()
            if code is not None:
                self.exits.append(code)
                self.procs.remove(p)
        if not self.procs:
            self.start()

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.main.pid, sig)

    def kill(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(60)
        self.procs.clear()

    def stop(self, timeout: float = 300) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGCONT)
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)
        self.procs.clear()

    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"


def _configs(kafka: LocalKafka, lake: Path, work: Path, prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    catalog = {"type": "jdbc", "uri": f"jdbc:sqlite:{lake / 'catalog.db'}", "warehouse": str(lake / "warehouse")}
    maintenance = {"in_run": True, "interval": "30 seconds", "min_interval": "15 seconds",
                   "log_table": "chaos.maintenance",
                   "policy": {"hot_partition_quiet_seconds": 20, "min_input_files": 3, "snapshots_trigger": 15,
                              "snapshot_retain_last": 5, "snapshot_max_age_seconds": 30, "manifests_trigger": 8,
                              "orphan_min_age_seconds": 3600,
                              "steps": ["expire_snapshots", "rewrite_data_files", "rewrite_position_delete_files",
                                        "rewrite_manifests", "remove_orphan_files"]}}
    stream = {"trigger_interval": "2 seconds", "takeover_after": "10 seconds", "restart_attempts": 50}
    spark = {"master": "local[2]", "conf": {"spark.driver.memory": "1g"}}
    health = {"webhook_url": f"http://chaos:{checks.SECRET}@127.0.0.1:9/hook"}
    append = {
        "name": "chaos-append",
        "source": {"bootstrap_servers": kafka.bootstrap, "topic_pattern": f"{prefix}-ev-(a|b)",
                   "starting_offsets": "earliest", "max_offsets_per_trigger": 3000},
        "catalog": catalog,
        "target": {"route": {"by": "field", "name": "kind", "table": "chaos.{value}"},
                   "partition_by": ["days(event_time)"]},
        "dead_letter": {"table": "chaos.dead_letters"},
        "stream": {**stream, "checkpoint_location": str(work / "append" / "checkpoint"),
                   "batch_log_table": "chaos.batches"},
        "maintenance": maintenance, "health": health, "spark": spark,
    }
    cdc = {
        "name": "chaos-cdc",
        "source": {"bootstrap_servers": kafka.bootstrap, "topics": [f"{prefix}-cdc"],
                   "starting_offsets": "earliest", "max_offsets_per_trigger": 3000},
        "catalog": catalog,
        "target": {"table": "chaos_cdc.customers", "schema": "id BIGINT, name STRING, balance DOUBLE",
                   "cdc": {"primary_key": ["id"], "format": "debezium", "ordering": "source.lsn",
                           "tombstones": True}},
        "dead_letter": {"table": "chaos_cdc.dead_letters"},
        "stream": {**stream, "checkpoint_location": str(work / "cdc" / "checkpoint"), "batch_log_table": None},
        "maintenance": {**maintenance, "log_table": "chaos_cdc.maintenance"}, "health": health, "spark": spark,
    }
    return append, cdc


class Chaos:
    def __init__(self, seed: int, minutes: float, work: Path) -> None:
        self.seed, self.seconds, self.work = seed, minutes * 60, work
        self.prefix = f"chaos{seed}"
        self.faults = plan(seed, self.seconds)
        self.done: list[dict[str, Any]] = []
        self.kafka = LocalKafka(port=free_port_pair())
        self.lake = work / "lake"

    def say(self, text: str) -> None:
        print(f"[chaos seed={self.seed} t={time.monotonic() - self.t0:6.1f}s {time.strftime('%H:%M:%S')}] {text}",
              flush=True)

    def setup(self) -> None:
        self.lake.mkdir(parents=True, exist_ok=True)
        self.kafka.reset()
        self.kafka.start()
        self.topics = (f"{self.prefix}-ev-a", f"{self.prefix}-ev-b")
        for t in self.topics:
            create_topic(self.kafka.bootstrap, t, 2)
        create_topic(self.kafka.bootstrap, f"{self.prefix}-cdc", 2)
        append, cdc = _configs(self.kafka, self.lake, self.work, self.prefix)
        self.pipes: dict[str, Pipeline] = {}
        for raw in (append, cdc):
            key = "append" if raw is append else "cdc"
            d = self.work / key
            d.mkdir(parents=True, exist_ok=True)
            path = d / "pipeline.yaml"
            path.write_text(yaml.safe_dump(raw))
            second = dict(raw, stream={**raw["stream"], "checkpoint_location": str(d / "checkpoint-standby")})
            (d / "standby.yaml").write_text(yaml.safe_dump(second))
            self.pipes[key] = Pipeline(raw["name"], path, d)

    def run(self) -> dict[str, Any]:
        self.t0 = time.monotonic()
        self.setup()
        self.say(f"{len(self.faults)} faults planned over {self.seconds:.0f}s:\n  "
                 + "\n  ".join(f.describe() for f in self.faults))
        self.append = AppendWorkload(self.kafka.bootstrap, self.topics, RATE, self.seed,
                                     (self.seconds * 0.3, self.seconds * 0.6)).start()
        self.cdc = CdcWorkload.make(self.kafka.bootstrap, f"{self.prefix}-cdc", self.seed,
                                    changes=int(self.seconds * 60), spread=self.seconds * 0.7).start()
        for p in self.pipes.values():
            p.start()
        try:
            for f in self.faults:
                while time.monotonic() - self.t0 < f.at:
                    self._reap()
                    time.sleep(0.5)
                self.say("fault: " + f.describe())
                began = time.monotonic()
                getattr(self, f"_{f.kind}")(f)
                self.done.append({**f.as_dict(), "took": round(time.monotonic() - began, 1)})
            while time.monotonic() - self.t0 < self.seconds:
                self._reap()
                time.sleep(0.5)
            self.say("producing stops; draining")
            self.append.stop()
            self.cdc.join()
            for p in self.pipes.values():
                self._reap()
                p.stop()
            return self._finish()
        finally:
            for p in self.pipes.values():
                p.kill()
            self.kafka.reset()

    def _reap(self) -> None:
        for p in self.pipes.values():
            before = len(p.exits)
            p.reap()
            if len(p.exits) > before:
                self.say(f"{p.name}: a run ended on its own (exit {p.exits[-1]}); started again")
                if p.exits[-1] == 2:  # a configuration error: the harness's own mistake, not a finding
                    raise RuntimeError(f"{p.name} refused its configuration:\n"
                                       + p.logs[-2].read_text(errors="replace")[-2000:])

    def _finish(self) -> dict[str, Any]:
        for _key, p in self.pipes.items():  # drain to idle: every record produced has been offered
            log = p.workdir / "drain.log"
            proc = start(p.cfg, log, "--until-idle", "--for", "900")
            code = proc.wait(1000)
            p.logs.append(log)
            self.say(f"{p.name}: drained (exit {code})")
            if code != 0:
                p.exits.append(code)
        report = checks.run_all(self)
        report.update(seed=self.seed, minutes=self.seconds / 60, faults=self.done,
                      machine=f"{os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}")
        for c in report["checks"]:
            self.say(f"check {'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}")
        if not all(c["ok"] for c in report["checks"]):  # what the runs said about where they started, for the replay
            for p in self.pipes.values():
                for line in checks.story(p.logs):
                    print(f"  {p.name} {line}", flush=True)
        return report

    # -- faults --------------------------------------------------------------------------------
    def _kill(self, f: Fault) -> None:
        p = self.pipes[f.pipeline]
        p.kill()
        time.sleep(f.duration)
        p.start()

    def _pause(self, f: Fault) -> None:
        p = self.pipes[f.pipeline]
        p.signal(signal.SIGSTOP)
        time.sleep(f.duration)
        p.signal(signal.SIGCONT)

    def _standby(self, f: Fault) -> None:
        p = self.pipes[f.pipeline]
        p.signal(signal.SIGSTOP)
        second = p.start(p.workdir / "standby.yaml")
        time.sleep(f.duration)
        p.signal(signal.SIGCONT)
        time.sleep(5)
        try:
            os.killpg(second.pid, signal.SIGTERM)
            second.wait(240)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(30)
        if second in p.procs:
            p.procs.remove(second)

    def _broker(self, f: Fault) -> None:
        self.kafka.stop()
        time.sleep(f.duration)
        self.kafka.start()

    def _retention(self, f: Fault) -> None:
        """Kafka deletes records of the first topic up to ``amount`` past what the pipeline has
        committed, while the pipeline is paused (retention while it lagged)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        p = self.pipes["append"]
        p.signal(signal.SIGSTOP)
        try:
            topic = self.topics[0]
            admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
            ends = checks.end_offsets(self.kafka.bootstrap, topic)
            read = checks.checkpoint_partitions(p.checkpoint(), topic)
            cuts = [TopicPartition(topic, part, min(end, max(0, end - f.amount))) for part, end in ends.items()
                    if part in read]
            self.say(f"retention cuts {[(c.partition, c.offset) for c in cuts]} (positions in {sorted(read)})")
            if cuts:
                for _tp, fut in admin.delete_records(cuts).items():
                    fut.result(30)
            time.sleep(f.duration)
        finally:
            p.signal(signal.SIGCONT)

    def _partitions(self, f: Fault) -> None:
        from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
        topic = self.topics[0]
        now = len(admin.list_topics(topic, timeout=30).topics[topic].partitions)
        admin.create_partitions([NewPartitions(topic, now + 1)])[topic].result(30)

    def _checkpoint(self, f: Fault) -> None:
        p = self.pipes[f.pipeline]
        p.kill()
        shutil.rmtree(p.checkpoint(), ignore_errors=True)
        time.sleep(f.duration)
        p.start()

    def _recreate(self, f: Fault) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        p = self.pipes["append"]
        p.kill()
        topic = self.topics[1]
        self.append.hold()  # nothing in flight to the topic being deleted
        admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
        admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
        deadline = time.monotonic() + 120
        while True:
            try:
                admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        self.append.incarnation[topic] += 1
        self.append.release()
        time.sleep(f.duration)
        p.start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument("--work", type=Path, default=None, help="working folder (default: a new temporary one)")
    ap.add_argument("--record", action="store_true", help="write the result to tests/chaos/results/")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix=f"icetide-chaos-{args.seed}-"))
    print(f"chaos run: seed {args.seed}, {args.minutes} minutes, work folder {work} "
          f"(replay: python -m tests.chaos.run --seed {args.seed} --minutes {args.minutes})", flush=True)
    report = Chaos(args.seed, args.minutes, work).run()
    ok = all(c["ok"] for c in report["checks"])
    if args.record:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"seed-{args.seed}-{int(args.minutes)}min.json"
        out.write_text(json.dumps(report, indent=1, sort_keys=True, default=str) + "\n")
        print(f"result written to {out}")
    print(f"chaos run seed {args.seed}: {'every check exact' if ok else 'CHECKS FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
