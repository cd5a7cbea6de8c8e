#!/usr/bin/env bash
# The end-to-end demo: installs what is needed, starts local registries and a fake
# GitHub on loopback, then runs airgap from collect to verify. Output in ./demo-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python scripts/demo.py "$@"
