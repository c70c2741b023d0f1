#!/usr/bin/env bash
# The chaos run (#41): a seeded fault schedule over the real stack, then exact checks.
#   scripts/chaos.sh --minutes 30 --seed 7 [--record]
# Needs `scripts/setup.sh` once (the virtualenv, Kafka and Spark jars). Exit 0 only if every check is exact.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m tests.chaos.run "$@"
