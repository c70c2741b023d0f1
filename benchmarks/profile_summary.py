"""Where an executor's CPU goes, from a JFR recording (``ICETIDE_BENCH_JFR=<folder>`` in a benchmark run).

Counts ``jdk.ExecutionSample`` events of Spark's executor threads, inclusively per component (a
sample counts for every component with a frame anywhere on its stack), and the most frequent top
frames. Uses the JDK's ``jfr print``; no other tool.

    .venv/bin/python -m benchmarks.profile_summary /tmp/jfr/icetide_avro.jfr [--top 25]
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field

#: component → a pattern over frame names (inclusive: any frame of the stack)
COMPONENTS = {
    "Iceberg and Parquet write": r"org\.apache\.(iceberg|parquet)\.",
    "of which Parquet dictionary encoding": r"parquet\.column\.values\.dictionary",
    "UnsafeRow and projections": r"UnsafeProjection|UnsafeRow",
    "Spark generated code": r"GeneratedClass",
    "Kafka read": r"org\.apache\.kafka\.|KafkaDataConsumer",
    "Avro: from_avro expression": r"AvroDataToCatalyst",
    "Avro: Spark's AvroDeserializer": r"org\.apache\.spark\.sql\.avro\.AvroDeserializer",
    "Avro: binary decoding": r"org\.apache\.avro\.(generic|io)\.",
    "JSON: Jackson": r"com\.fasterxml\.jackson\.",
    "icetide's JSON checks": r"io\.icetide\.spark\.(JsonChecks|ScanningParser)",
}
EXECUTOR = "Executor task launch"


@dataclass
class Summary:
    samples: int = 0
    components: Counter[str] = field(default_factory=Counter)
    top: Counter[str] = field(default_factory=Counter)


def summarize(printed: str) -> Summary:
    """``printed``: the text of ``jfr print --events jdk.ExecutionSample``."""
    out = Summary()
    for event in printed.split("jdk.ExecutionSample")[1:]:
        thread = re.search(r'sampledThread = "([^"]*)"', event)
        if thread is None or EXECUTOR not in thread.group(1):
            continue
        out.samples += 1
        frames = re.findall(r"^\s+([\w$.<>]+)\(", event, re.M)
        if frames:
            out.top[frames[0]] += 1
        for name, pattern in COMPONENTS.items():
            if any(re.search(pattern, f) for f in frames):
                out.components[name] += 1
    return out


def render(s: Summary, top: int) -> str:
    lines = [f"executor samples: {s.samples}", "", "| component (inclusive) | samples | share |", "|---|---:|---:|"]
    lines += [f"| {k} | {v} | {100 * v / max(s.samples, 1):.1f}% |" for k, v in s.components.most_common()]
    lines += ["", "| top frame | samples |", "|---|---:|"]
    lines += [f"| `{k}` | {v} |" for k, v in s.top.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recording")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    printed = subprocess.run(["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "200",
                              args.recording], capture_output=True, text=True, check=True).stdout
    print(render(summarize(printed), args.top))


if __name__ == "__main__":
    main()
