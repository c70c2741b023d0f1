"""A chaos run: pipelines on the real stack under a seeded fault schedule, then exact checks.

    python -m tests.chaos.run --minutes 30 --seed 7 [--stack full] [--record]

Starts its own Kafka broker (KRaft) and a local lake (Iceberg JDBC catalog on SQLite), runs a routed
append pipeline and a Debezium CDC pipeline (``pipelines.py``; each ``icetide run`` in its own
process group, in-run maintenance on). ``--stack full`` also starts a schema registry (Apicurio),
an object store (SeaweedFS) and Iceberg's REST catalog over it, runs a third pipeline (Debezium
Avro into the REST catalog) and adds the faults of those services. Produces records for
``--minutes`` while the faults of :func:`tests.chaos.schedule.plan` land, then lets every
pipeline drain to idle and checks (``checks.py``).
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
from pathlib import Path
from typing import Any

import yaml

from icetide.demo.events import create_topic
from icetide.services.kafka import LocalKafka
from icetide.services.object_store import PORTS_USED, LocalObjectStore
from icetide.services.registry import LocalRegistry
from icetide.services.rest_catalog import LocalRestCatalog
from icetide.services.spark_cluster import LocalSparkCluster
from tests.chaos import checks
from tests.chaos.pipelines import Pipeline, avro_config, configs
from tests.chaos.schedule import FULL_KINDS, FULL_PIPELINES, KINDS, PIPELINES, Fault, plan
from tests.chaos.workload import AppendWorkload, CdcWorkload
from tests.fixtures.stack import children, free_port_block, free_port_pair, start

RESULTS = Path(__file__).with_name("results")
RATE = 100.0  # append records a second


class Chaos:
    def __init__(self, seed: int, minutes: float, work: Path, stack: str = "local", orphan_age: float = 3600) -> None:
        self.seed, self.seconds, self.work, self.full = seed, minutes * 60, work, stack == "full"
        self.orphan_age = orphan_age
        self.prefix = f"chaos{seed}"
        self.faults = (plan(seed, self.seconds, kinds=FULL_KINDS, pipelines=FULL_PIPELINES) if self.full
                       else plan(seed, self.seconds, kinds=KINDS, pipelines=PIPELINES))
        self.done: list[dict[str, Any]] = []
        self.kafka = LocalKafka(port=free_port_pair())
        self.lake = work / "lake"
        self.avro: CdcWorkload | None = None
        if self.full:
            port = free_port_pair()
            self.registry = LocalRegistry(port=port, management_port=port + 1)
            self.store = LocalObjectStore(port=free_port_block(PORTS_USED))
            self.rest = LocalRestCatalog(port=free_port_pair(), store=self.store)
            # the Avro pipeline's Spark: a standalone cluster, so an executor can die alone
            self.cluster = LocalSparkCluster(port=free_port_block(4), workers=2, cores_per_worker=1,
                                             memory_per_worker="1536m")

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
        if self.orphan_age < 3600:  # icetide is the only writer here: its in-flight markers alone protect
            os.environ["ICETIDE_ORPHAN_FLOOR_SECONDS"] = str(self.orphan_age)
        raws = configs(self.kafka, self.lake, self.work, self.prefix, self.orphan_age)
        if self.full:
            for service in (self.registry, self.store, self.rest, self.cluster):
                service.reset()
                service.start()
            os.environ.update(self.store.credentials().env())  # the catalog section names them
            create_topic(self.kafka.bootstrap, f"{self.prefix}-avro", 2)
            raws["avro"] = avro_config(self.kafka, self.registry, self.rest, self.work, self.prefix, raws["cdc"],
                                       self.cluster.master_url)
        self.pipes: dict[str, Pipeline] = {}
        for key, raw in raws.items():
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
        if self.full:
            self.avro = CdcWorkload.make_avro(self.kafka.bootstrap, f"{self.prefix}-avro", self.seed,
                                              changes=int(self.seconds * 40), spread=self.seconds * 0.7,
                                              registry_url=self.registry.url).start()
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
            if self.avro is not None:
                self.avro.join()
            self._reap()  # once, before any stop: a reap after a pipeline's stop would start it again
            for p in self.pipes.values():
                p.stop()
            return self._finish()
        finally:
            for p in self.pipes.values():
                p.kill()
            self.kafka.reset()
            if self.full:
                for service in (self.rest, self.store, self.registry, self.cluster):
                    service.reset()

    def _reap(self) -> None:
        for p in self.pipes.values():
            before = len(p.exits)
            p.reap()
            if len(p.exits) > before:
                self.say(f"{p.name}: a run ended on its own (exit {p.exits[-1]}); started again")
                if p.exits[-1] == 2 and len(p.logs) <= 2:  # its first run refused the config: the harness's mistake
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
        code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip() or "unknown"
        report.update(seed=self.seed, minutes=self.seconds / 60, stack="full" if self.full else "local", code=code,
                      orphan_age=self.orphan_age,
                      faults=self.done,
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

    def _executor(self, f: Fault) -> None:
        """SIGKILL every executor the cluster's workers launched (the workers stay: they start new
        ones, and Spark reruns the lost tasks)."""
        killed = []
        for i in range(1, self.cluster.workers + 1):
            worker = self.cluster.worker_pid(i)
            for pid in children(worker) if worker is not None else []:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
        self.say(f"executors killed: {killed or 'none running'}")

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
        before = len(p.stopped_badly)
        early = second.poll()  # nothing may stop a run, a second one included (the review of #41)
        if early is not None:
            p.stopped_badly.append(f"ended on its own (exit {early})")
        else:
            try:
                os.killpg(second.pid, signal.SIGTERM)
                code = second.wait(240)
                if code != 0:
                    p.stopped_badly.append(f"exit {code} on SIGTERM")
            except subprocess.TimeoutExpired:
                p.stopped_badly.append("still running 240 s after SIGTERM")
                os.killpg(second.pid, signal.SIGKILL)
                second.wait(30)
            except ProcessLookupError:
                p.stopped_badly.append("gone before SIGTERM")
        if len(p.stopped_badly) > before:
            self.say(f"{p.name}: second run: {p.stopped_badly[-1]}")
        if second in p.procs:
            p.procs.remove(second)

    @staticmethod
    def _down(service: Any, f: Fault) -> None:
        """A service (the broker, the registry, the REST catalog, the object store) down for ``f.duration``."""
        service.stop()
        time.sleep(f.duration)
        service.start()

    def _broker(self, f: Fault) -> None:
        self._down(self.kafka, f)

    def _registry(self, f: Fault) -> None:
        self._down(self.registry, f)

    def _rest(self, f: Fault) -> None:
        self._down(self.rest, f)

    def _store(self, f: Fault) -> None:
        self._down(self.store, f)

    def _retention(self, f: Fault) -> None:
        """While the pipeline is paused, Kafka deletes every record of the first topic but the newest
        ``amount`` of each partition the pipeline has a position in (retention while it lags): what
        lay between its position and the cut is lost unread, the rest it had read already."""
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
        self.append.release(renew=True)
        time.sleep(f.duration)
        p.start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument("--work", type=Path, default=None, help="working folder (default: a new temporary one)")
    ap.add_argument("--stack", choices=("local", "full"), default="local",
                    help="full: also a schema registry, an object store and a REST catalog, an Avro CDC "
                         "pipeline into them and their faults")
    ap.add_argument("--orphan-age", type=float, default=3600,
                    help="orphan cleanup's age floor in seconds (under 3600: files a minute old can be orphans, so "
                         "only icetide's in-flight markers protect its writes)")
    ap.add_argument("--record", action="store_true", help="write the result to tests/chaos/results/")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix=f"icetide-chaos-{args.seed}-"))
    print(f"chaos run: seed {args.seed}, {args.minutes} minutes, {args.stack} stack, work folder {work} "
          f"(replay: scripts/chaos.sh --seed {args.seed} --minutes {args.minutes} --stack {args.stack} "
          f"--orphan-age {args.orphan_age:g})", flush=True)
    report = Chaos(args.seed, args.minutes, work, args.stack, args.orphan_age).run()
    ok = all(c["ok"] for c in report["checks"])
    if args.record:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"seed-{args.seed}-{int(args.minutes)}min{'-full' if args.stack == 'full' else ''}.json"
        out.write_text(json.dumps(report, indent=1, sort_keys=True, default=str) + "\n")
        print(f"result written to {out}")
    print(f"chaos run seed {args.seed}: {'every check exact' if ok else 'CHECKS FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
