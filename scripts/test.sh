#!/usr/bin/env bash
# One command from a fresh clone: set up, lint, type-check, run the whole test suite on the real
# stack (the tests start their own Kafka broker, object store, REST catalogs and Spark cluster on 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
scripts/setup.sh
# The report test opens the HTML report in a real headless browser.
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
echo "== set-up, lint and type check: $((SECONDS - started)) s; pytest next (its time per module at the end)"
# Whole modules side by side (pytest-xdist), longest first (tests/conftest.py): the real-stack tests
# spend most of their time waiting on triggers, commits and process starts, so the cores are idle
# for much of a serial run. Each worker has its own broker, catalog, SparkSession and ports.
# ICETIDE_TEST_WORKERS=0 (or -n 0) runs everything in this one process.
exec .venv/bin/python -m pytest -n "${ICETIDE_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder "$@"
