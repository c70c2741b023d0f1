#!/usr/bin/env bash
# One command from a fresh clone: set up, lint, type-check, run the whole test suite on the real
# stack (the tests start their own Kafka broker, object store, REST catalogs and Spark cluster on 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The report test opens the HTML report in a real headless browser.
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
