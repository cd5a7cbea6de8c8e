#!/usr/bin/env bash
# The test command: install what is needed, then lint, type-check and run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/pytest -q --durations=15 "$@"
