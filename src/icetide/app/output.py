"""Shared CLI output helpers: ``--output text|json``, errors as one clear line."""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from icetide.errors import IcetideError
from icetide.secrets import error_line, install_log_filter, scrub

console = Console()
err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])

EXIT_CONFIG = 2
EXIT_RUNTIME = 1
#: LSB's "program is not running", for the status commands of local services
EXIT_NOT_RUNNING = 3

output_option = click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="Output format.",
)


def emit_json(data: Any) -> None:
    click.echo(scrub(json.dumps(data, indent=2, sort_keys=True, default=str)))


def handle_errors(fn: F) -> F:
    """Turn icetide errors into ``icetide: <message>`` on stderr and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except IcetideError as e:
            _trace_if_verbose()
            for line in scrub(str(e)).splitlines():
                click.echo(f"icetide: {line}" if not line.startswith(" ") else line, err=True)
            sys.exit(EXIT_CONFIG if e.terminal else EXIT_RUNTIME)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as e:  # not one of icetide's: one line all the same, the trace with -v
            _trace_if_verbose()
            click.echo(f"icetide: {type(e).__name__}: {_useful_line(e)}"
                       + ("" if _verbose() else " (icetide -v shows the trace)"), err=True)
            sys.exit(EXIT_RUNTIME)

    return wrapper  # type: ignore[return-value]


def _verbose() -> bool:
    return logging.getLogger().isEnabledFor(logging.DEBUG)


def _trace_if_verbose() -> None:
    if _verbose():
        import traceback

        click.echo(scrub(traceback.format_exc()).rstrip(), err=True)


def _useful_line(e: BaseException) -> str:
    """The line of an error that says what happened: for a JVM error through Py4J, the Java
    exception's message rather than "An error occurred while calling o123.sql"."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(": ") or (ln[:1].isalpha() and "Exception: " in ln.split(" ")[0] + " "):
            return scrub(ln.lstrip(": "))[:500]
    return error_line(e, 500)


def setup_logging(verbose: bool, quiet: bool = False) -> None:
    """``-v``: debug logging and Spark's own log lines on the terminal; ``-q``: warnings and errors only,
    no tables or progress (for scripts: ``--output json`` still prints its JSON)."""
    import os

    if verbose:
        os.environ["ICETIDE_SPARK_LOG"] = "console"
    console.quiet = quiet
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    install_log_filter()
    for noisy in ("py4j", "py4j.clientserver", "py4j.java_gateway", "httpx", "httpx2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
