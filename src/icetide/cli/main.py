"""``icetide``: ingest Kafka into Iceberg exactly once, and keep the tables healthy.

Commands are grouped by area: :mod:`icetide.cli.pipeline` (setup, kafka, check, run, offsets,
demo), :mod:`icetide.cli.dead_letters`, :mod:`icetide.cli.health` (status, health, report,
metrics, ui), :mod:`icetide.cli.maintenance` (plan, maintain), :mod:`icetide.cli.dev` (dev up|down|status,
submit).
"""

from __future__ import annotations

import click

from icetide import __version__
from icetide.app.output import setup_logging
from icetide.cli import dead_letters, dev, health, maintenance, pipeline


@click.group()
@click.version_option(__version__, prog_name="icetide")
@click.option("--verbose", "-v", is_flag=True, help="Debug logging; Spark's own log lines on the terminal.")
@click.option("--quiet", "-q", is_flag=True, help="Only warnings, errors and --output json (for scripts).")
def cli(verbose: bool, quiet: bool) -> None:
    """icetide: Kafka → Apache Iceberg on Spark, exactly once, with table upkeep."""
    setup_logging(verbose, quiet)


for command in (pipeline.setup, pipeline.kafka, pipeline.check, pipeline.run, pipeline.offsets,
                dead_letters.dead_letters, health.status, health.health, maintenance.plan, maintenance.maintain,
                health.report, health.metrics, health.ui, pipeline.demo, dev.dev, dev.submit):
    cli.add_command(command)


def main() -> None:
    """The console script; an unexpected error prints its traceback with secrets masked."""
    import sys
    import traceback

    from icetide.secrets import scrub

    try:
        cli(prog_name="icetide")
    except Exception:
        sys.stderr.write(scrub(traceback.format_exc()))
        sys.exit(1)


if __name__ == "__main__":
    main()
