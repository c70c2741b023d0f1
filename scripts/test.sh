#!/usr/bin/env bash
# One command from a fresh clone: set up, lint, type-check, run the whole test suite on the real
# stack (the tests start their own Kafka broker and REST catalog on 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
