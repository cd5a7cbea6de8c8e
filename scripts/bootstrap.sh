#!/usr/bin/env bash
# Install what airgap and its tests need on a fresh Debian machine: the distribution
# registry, skopeo, htpasswd and umoci from apt, then a virtualenv with airgap in it.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# containerd and podman: the tests pull through the generated node mirror configuration
# with the real runtimes (a private containerd on its own socket, podman with its own roots)
# python3-venv: the virtualenv is made with Debian's own interpreter (below)
# chromium: the review report (verify --report) is tested in a real browser, headless
packages=(docker-registry skopeo apache2-utils containerd podman umoci python3-venv chromium)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]} (apt)" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Debian package may start a system registry on :5000; airgap's tests and demo start
# their own on ephemeral ports and do not need it.

# The interpreter: $PYTHON if set; otherwise Debian's /usr/bin/python3 when it is 3.11
# or newer, else python3 from PATH. Debian builds its interpreter with profile-guided and
# link-time optimisation, libpython linked into the binary; a self-built one (pyenv's default:
# shared libpython, no PGO) ran a no-op re-import 16% and a fresh import 4% slower here
# (benchmarks/README.md, Findings). An existing .venv is kept: remove it to change.
python=${PYTHON:-}
if [ -z "$python" ]; then
  python=python3
  if /usr/bin/python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    python=/usr/bin/python3
  fi
fi
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv" >&2
  "$python" -m venv .venv
fi
# The versions are constraints.txt's, the set the suite last passed with; PIP_CONSTRAINT
# (not -c) so that the isolated build of airgap itself gets the pinned setuptools too.
stamp=.venv/.airgap-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  echo "bootstrap: installing airgap into .venv" >&2
  export PIP_CONSTRAINT="$PWD/constraints.txt"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
