#!/usr/bin/env bash
# Install the panel into ./.venv (first time, or when pyproject.toml changed) and run it.
# Arguments go to `appliance run`, e.g. ./run.sh --port 8080 --data-dir ./data
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -e .
    touch .venv/.installed
fi
exec .venv/bin/appliance run "$@"
