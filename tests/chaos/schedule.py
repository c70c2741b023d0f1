"""The fault schedule of a chaos run: a pure function of the seed (no I/O), so a failure replays.

Faults come one at a time at random moments (exponential gaps around ``mean_gap`` seconds), each
with a random kind, target and duration; the schedule leaves the run's last stretch quiet so that
the pipelines drain before the checks. Kinds:

- ``kill``: SIGKILL a pipeline's process group (driver and Spark JVM), restarted ``duration`` later;
- ``pause``: SIGSTOP it for ``duration`` seconds, then SIGCONT;
- ``standby``: SIGSTOP it, start a second run of the same pipeline (its own checkpoint folder, as
  on another host) for ``duration`` seconds, SIGCONT the first, and stop the second;
- ``broker``: stop the Kafka broker for ``duration`` seconds;
- ``retention``: Kafka deletes records of the append topic below a point the pipeline may not
  have read yet (``delete_records``), the pipeline paused meanwhile; only in partitions the
  pipeline's checkpoint has a position in (what it never read was never its to lose);
- ``partitions``: a partition added to the append topic;
- ``checkpoint``: SIGKILL a pipeline, delete its checkpoint folder, restart it;
- ``recreate``: SIGKILL the append pipeline, delete the second append topic and create it again;

and, on the full stack only (``--stack full``: a third pipeline, Avro through a schema registry into
Iceberg's REST catalog over an S3 object store):

- ``registry``: stop the schema registry for ``duration`` seconds;
- ``rest``: stop the REST catalog server for ``duration`` seconds (its state survives: a restart);
- ``store``: stop the object store (SeaweedFS) for ``duration`` seconds;
- ``executor``: SIGKILL the Spark executors of the Avro pipeline, which runs on a standalone
  cluster (a master and two one-core workers); the workers launch new ones and Spark reruns the
  lost tasks.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

KINDS = ("kill", "pause", "standby", "broker", "retention", "partitions", "checkpoint", "recreate")
#: the full stack's kinds: the local ones and the faults of the services only it runs
FULL_KINDS = (*KINDS, "registry", "rest", "store", "executor")
#: faults that only make sense for the append pipeline (the CDC table's final state must be exact)
APPEND_ONLY = frozenset({"retention", "partitions", "recreate"})
#: faults of the pipeline that runs on the standalone cluster (the full stack's Avro pipeline)
CLUSTER_ONLY = frozenset({"executor"})
#: faults of a shared service: no pipeline is their target
SERVICES = frozenset({"broker", "registry", "rest", "store"})
PIPELINES = ("append", "cdc")
FULL_PIPELINES = (*PIPELINES, "avro")


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the start
    kind: str
    pipeline: str  # "append", "cdc" or "avro" ("-" for a service)
    duration: float  # seconds (kill: until the restart; pause/standby/a service: how long)
    amount: int = 0  # retention: how many of each partition's newest records Kafka keeps (the rest is deleted)

    def describe(self) -> str:
        what = {"kill": "SIGKILL, restart after", "pause": "SIGSTOP for", "standby": "paused, a second run for",
                "broker": "broker down for", "retention": "delete_records while paused for",
                "partitions": "add a partition", "checkpoint": "kill, delete the checkpoint, restart after",
                "recreate": "kill, recreate the second topic, restart after",
                "registry": "schema registry down for", "rest": "REST catalog down for",
                "store": "object store down for", "executor": "SIGKILL its Spark executors"}[self.kind]
        extra = f" (keeps the newest {self.amount} of each partition)" if self.kind == "retention" else ""
        return f"t={self.at:6.1f}s {self.kind:<10} {self.pipeline:<6} {what} {self.duration:.1f}s{extra}"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def plan(seed: int, seconds: float, mean_gap: float = 25.0, quiet_tail: float = 30.0,
         kinds: tuple[str, ...] = KINDS, pipelines: tuple[str, ...] = PIPELINES) -> list[Fault]:
    """The faults of a run of ``seconds`` (the last ``quiet_tail`` seconds free of them): the same
    list for the same arguments, on any machine (the local stack's defaults give the lists they
    always gave, so an old seed replays)."""
    rng = random.Random(seed)
    out: list[Fault] = []
    t = rng.uniform(25, 40)  # let the pipelines start and commit first
    while True:
        kind = rng.choice(kinds)
        pipeline = ("append" if kind in APPEND_ONLY else "-" if kind in SERVICES else "avro" if kind in CLUSTER_ONLY
                    else rng.choice(pipelines))
        # every draw below happens whatever the kind: the local kinds' draws are the ones they
        # always were (an old seed replays); the services' are drawn only for them
        local = {"kill": rng.uniform(1, 8), "pause": rng.uniform(3, 25), "standby": rng.uniform(20, 45),
                 "broker": rng.uniform(5, 25), "retention": rng.uniform(3, 10), "partitions": 0.0,
                 "checkpoint": rng.uniform(1, 5), "recreate": rng.uniform(2, 6)}
        duration = local[kind] if kind in local else {"registry": rng.uniform(5, 40), "rest": rng.uniform(3, 20),
                                                      "store": rng.uniform(3, 20), "executor": 0.0}[kind]
        if t + duration > seconds - quiet_tail:
            return out
        out.append(Fault(round(t, 1), kind, pipeline, round(duration, 1), rng.randint(50, 400)))
        t += duration + rng.expovariate(1 / mean_gap)
