#!/bin/sh
# Installs airgap @VERSION@ from the wheels beside this script, without a network:
# a virtualenv made by python3's own venv module, then pip install --no-index.
# Usage: ./install.sh [PREFIX]    (default: $HOME/.local/share/airgap)
#   PYTHON=/path/to/python3 chooses the interpreter (default: python3 on PATH).
# Running it again is harmless: the virtualenv is kept and pip finds airgap installed.
set -eu

version='@VERSION@'
pythons='@PYTHONS@'
machines='@MACHINES@'

fail() {
  echo "install.sh: error: $*" >&2
  exit 1
}

case ${1:-} in
  -h | --help)
    sed -n '2,6s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  -*) fail "unknown option $1 (usage: ./install.sh [PREFIX])" ;;
esac
here=$(cd "$(dirname "$0")" && pwd -P)
prefix=${1:-${HOME:?}/.local/share/airgap}
python=${PYTHON:-python3}

command -v "$python" >/dev/null 2>&1 ||
  fail "no $python found: install CPython ${pythons} with its venv module (Debian, Ubuntu: apt-get install python3 python3-venv), or name one with PYTHON=/path/to/python3"
found=$("$python" -c 'import platform, sys; print(sys.implementation.name, "%d.%d" % sys.version_info[:2], platform.machine(), *(platform.libc_ver()[0] and platform.libc_ver()) or ("none", "0"))' 2>/dev/null) ||
  fail "$python does not run"
# shellcheck disable=SC2086 # four words: implementation, version, machine, C library and its version
set -- $found
implementation=${1:-} python_version=${2:-} machine=${3:-} libc=${4:-none} libc_version=${5:-0}
[ "$implementation" = cpython ] ||
  fail "$python is $implementation; this installer holds wheels for CPython ${pythons} only"
case " $pythons " in
  *" $python_version "*) ;;
  *) fail "$python is Python $python_version; this installer holds wheels for CPython ${pythons} only (name another with PYTHON=, or build one with airgap installer --python $python_version)" ;;
esac
case " $machines " in
  *" $machine "*) ;;
  *) fail "this machine is $machine; this installer holds wheels for ${machines} only (build one with airgap installer --machine $machine)" ;;
esac
libc_minor=${libc_version#2.}
libc_minor=${libc_minor%%.*}
case $libc/$libc_version in
  glibc/2.[0-9]*)
    [ "$libc_minor" -ge @GLIBC_MINOR@ ] 2>/dev/null ||
      fail "$python runs on glibc $libc_version; the wheels here need glibc 2.@GLIBC_MINOR@ or newer (RHEL 8, Ubuntu 20.04, Debian 11 and later)"
    ;;
  *) fail "$python runs on a C library other than glibc ($libc $libc_version); the wheels here are manylinux ones, for glibc 2.@GLIBC_MINOR@ or newer" ;;
esac
"$python" -c 'import venv, ensurepip' >/dev/null 2>&1 ||
  fail "$python has no venv module with ensurepip (Debian, Ubuntu: apt-get install python3-venv)"

optional=''
notes=''
case $machine in
@OPTIONAL_CASES@
esac

marker="$prefix/airgap-installer.json"
if [ -n "$(ls -A "$prefix" 2>/dev/null)" ] && [ ! -e "$prefix/pyvenv.cfg" ]; then
  fail "$prefix exists and is not a virtualenv: name an empty or new directory"
fi
venv_version=''
if [ -x "$prefix/bin/python" ]; then
  venv_version=$("$prefix/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
fi
if [ -n "$venv_version" ] && [ "$venv_version" != "$python_version" ] && [ ! -e "$marker" ]; then
  fail "$prefix is a virtualenv of Python $venv_version that this installer did not make: name another directory"
fi
if [ "$venv_version" != "$python_version" ]; then
  echo "install.sh: creating the virtualenv $prefix with $python (Python $python_version)" >&2
  "$python" -m venv --clear "$prefix" || fail "$python -m venv $prefix failed"
fi

# --no-index: pip looks at the wheels here and nowhere else
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
  "$prefix/bin/python" -m pip install --no-index --find-links "$here/wheels" \
  --only-binary=:all: --quiet "airgap==$version" $optional ||
  fail "pip could not install airgap $version from $here/wheels (its message is above)"
cp "$here/installer.json" "$marker.tmp" && mv "$marker.tmp" "$marker"

if [ -n "$notes" ]; then
  printf '%s\n' "$notes" | while IFS= read -r note; do
    echo "install.sh: note: on $machine $note" >&2
  done
fi
"$prefix/bin/airgap" version
echo "install.sh: airgap $version is installed in $prefix: run $prefix/bin/airgap (or add $prefix/bin to PATH)"
