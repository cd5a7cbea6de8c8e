#!/usr/bin/env bash
# The test command: install what is needed, then lint, type-check and run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# All three tiers (unit, integration, e2e) run here, and nothing is skipped quietly: with
# AIRGAP_TEST_REQUIRE_ALL=1 a skip (a tool missing, say) fails the test (tests/harness/tiers.py).
export AIRGAP_TEST_REQUIRE_ALL=1
exec .venv/bin/pytest -q --durations=15 "$@"
