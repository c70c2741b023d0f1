#!/usr/bin/env bash
# One command from a fresh clone: set up, then run the demo (local Kafka → Iceberg, report).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/icetide demo "$@"
