#!/usr/bin/env bash
# Set up icetide on a fresh Debian/Ubuntu machine: Java 17 + Maven (apt, if missing), a Python 3.11
# virtualenv in .venv with icetide and its pinned dependencies, and the pinned jars from Maven Central.
# Idempotent: rerunning skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v javac >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing ${need_apt[*]} with apt-get"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || { echo "icetide needs Python 3.11 (set PYTHON=/path/to/python3.11)"; exit 1; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"
.venv/bin/icetide setup
