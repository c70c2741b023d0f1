"""Each benchmark's reporting path, with no JVM: the committed results file of every benchmark that
has one is rendered again by the script's own code, and must give the committed report (so a
results file and the report beside it can never disagree, and a refactor that breaks a script's
report breaks this test). The JVM parts of the scripts run in tests/integration/test_benchmarks.py
(the ingest-path ones) or are covered by the import check in test_benchmarks.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def _load(rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BENCH / rel).read_text())
    return data


def test_fanout_report_renders_its_results(tmp_path: Path) -> None:
    from benchmarks.fanout import run

    r = _load("fanout/results/results.json")
    run.write_markdown(r, tmp_path / "results.md")
    run.plot(r, tmp_path / "fanout.png")
    assert (tmp_path / "results.md").read_text() == (BENCH / "fanout/results/results.md").read_text()
    assert (tmp_path / "fanout.png").stat().st_size > 10_000
    systems = {x["system"] for x in r["results"]}
    assert systems == set(run.SYSTEMS), "the committed run left a system out"


def test_the_kafka_connect_comparison_renders_its_results(tmp_path: Path) -> None:
    """The peer's run (results/connect/): the Kafka Connect sink beside vanilla-tuned and icetide."""
    from benchmarks.fanout import run

    r = _load("fanout/results/connect/results.json")
    run.write_markdown(r, tmp_path / "results.md")
    assert (tmp_path / "results.md").read_text() == (BENCH / "fanout/results/connect/results.md").read_text()
    assert {"vanilla-tuned", "icetide", "kafka-connect"} <= {x["system"] for x in r["results"]} <= {
        "vanilla-tuned", "icetide", *run.PEERS}
    assert "the Kafka Connect sink, steady: icetide ÷ kafka-connect" in (tmp_path / "results.md").read_text()


def test_fanout_targets_are_judged_from_the_figures() -> None:
    from benchmarks.fanout.run import targets

    def row(system: str, eps: float, steady: float, cpu: float, first: float = 8.0) -> dict[str, Any]:
        return {"system": system, "events_per_s": eps, "steady_events_per_s": steady, "jvm_cpu_s_per_m_events": cpu,
                "first_batch_s": first, "steady_batch_s": 4.0}

    got = {what: (measured, want) for what, measured, want, _ in targets([
        row("vanilla", 100.0, 120.0, 20.0), row("vanilla-tuned", 80.0, 100.0, 21.0),
        row("vanilla-by-route", 50.0, 60.0, 30.0), row("icetide", 88.0, 95.0, 23.0, first=9.0),
        row("icetide-expressions", 70.0, 76.0, 25.0), row("icetide-fanout", 40.0, 57.0, 40.0),
        row("vanilla-tuned-nodict", 120.0, 150.0, 15.0), row("icetide-nodict", 130.0, 180.0, 14.0),
        row("vanilla-tuned-smalldict", 110.0, 140.0, 16.0), row("icetide-smalldict", 99.0, 126.0, 17.0)])}
    # the targets of #39, each a ratio of two systems of the same run
    assert got["one table, whole run: icetide ÷ vanilla-tuned"] == (1.1, 1.1)
    assert got["one table, steady: icetide ÷ vanilla-tuned"] == (0.95, 1.1)
    assert got["one table, JVM CPU per event: icetide ÷ vanilla-tuned"] == (1.1, 0.9)
    assert got["decoder: icetide ÷ icetide-expressions, steady"] == (1.25, 1.0)
    assert got["no dictionary, both: icetide-nodict ÷ vanilla-tuned-nodict, steady"] == (1.2, 1.1)
    assert got["small dictionaries, both: icetide-smalldict ÷ vanilla-tuned-smalldict, steady"] == (0.9, 1.1)
    assert got["fan-out, whole run: icetide-fanout ÷ vanilla-by-route"] == (0.8, 1.0)
    assert got["fan-out, steady: icetide-fanout ÷ vanilla-by-route"] == (0.95, 1.0)
    assert got["icetide: first batch ÷ its steady batch"] == (2.25, 2.0)
    assert "fan-out, steady: icetide-fanout ÷ vanilla (one table)" not in got


def test_ingest_report_renders_its_results(tmp_path: Path) -> None:
    from benchmarks.ingest import run

    r = _load("ingest/results/results.json")
    run.write_markdown(r, tmp_path / "results.md")
    run.plot(r, tmp_path / "ingest.png")
    assert (tmp_path / "results.md").read_text() == (BENCH / "ingest/results/results.md").read_text()
    cfg = run.config("127.0.0.1:1", "t", "bench.x", tmp_path, "0 seconds")
    assert cfg["target"]["table"] == "bench.x" and cfg["stream"]["trigger_interval"] == "0 seconds"


def test_cdc_report_renders_its_results(tmp_path: Path) -> None:
    from benchmarks.cdc import run

    r = _load("cdc/results/results.json")
    run.write_markdown(r, tmp_path / "results.md")
    run.plot(r, tmp_path / "cdc.png")
    assert (tmp_path / "results.md").read_text() == (BENCH / "cdc/results/results.md").read_text()
    assert {x["system"] for x in r["throughput"]} == {s for s, _ in run.SYSTEMS}


def test_avro_report_renders_its_results() -> None:
    from benchmarks.avro.run import markdown

    assert markdown(_load("avro/results/results.json")) == (BENCH / "avro/results/results.md").read_text()


def test_ledger_and_cli_reports_render_their_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.cli import run as cli
    from benchmarks.ledger import run as ledger

    monkeypatch.setattr(ledger, "OUT", tmp_path)
    ledger.report(_load("ledger/results/ledger.json"))
    assert (tmp_path / "results.md").read_text().strip() == (BENCH / "ledger/results/results.md").read_text().strip()
    for name in ("before", "after"):
        (tmp_path / f"{name}.json").write_text((BENCH / f"cli/results/{name}.json").read_text())
    monkeypatch.setattr(cli, "RESULTS", tmp_path)
    assert cli.compare("before", "after") == (BENCH / "cli/results/results.md").read_text()


def test_steady_report_renders_its_results(tmp_path: Path) -> None:
    from benchmarks.steady import report

    result = _load("steady/results/steady.json")
    report.write(result, tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written, "the steady report wrote nothing"
    committed = BENCH / "steady/results" / "results.md"
    got = next(p for p in tmp_path.iterdir() if p.suffix == ".md")
    assert got.read_text() == committed.read_text()


def test_steady_frontier_replays_the_committed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from benchmarks.steady import frontier

    (tmp_path / "steady.json").write_text((BENCH / "steady/results/steady.json").read_text())
    monkeypatch.setattr(sys, "argv", ["frontier", str(tmp_path)])
    frontier.main()
    text = (tmp_path / "frontier.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| tiers, fanout ") or ln.startswith("| merge everything")]
    assert len(rows) == 6 and text.startswith("# Files against write amplification"), text
