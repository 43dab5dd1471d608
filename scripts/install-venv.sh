#!/bin/sh
# Install gpuledger and its test extras into a virtual environment (the Makefile's `install`).
# usage: scripts/install-venv.sh PYTHON VENV
#
# uv installs the ~95 packages in 10-30 s where pip takes a minute or more (pip resolves and
# unpacks one package at a time). uv comes from PATH, else from the package index into the venv;
# where it cannot be had, or its install fails (uv reads no pip configuration: a machine that
# only reaches a private index through pip.conf), pip installs as before. Progress is shown.
set -eu
PYTHON=$1
VENV=$2
PY=$VENV/bin/python

if [ ! -x "$PY" ]; then
  echo "gpuledger: creating $VENV"
  # no pip in it (ensurepip costs about 6 s): uv needs none, and pip is added only if needed
  "$PYTHON" -m venv --without-pip "$VENV" 2>/dev/null || "$PYTHON" -m venv "$VENV"
fi

has_pip() { "$PY" -m pip --version >/dev/null 2>&1; }

find_uv() {
  if [ -n "${GPULEDGER_NO_UV:-}" ]; then return 1; fi
  if command -v uv >/dev/null 2>&1; then command -v uv; return 0; fi
  if [ -x "$VENV/bin/uv" ]; then echo "$VENV/bin/uv"; return 0; fi
  # the interpreter's own pip installs into the venv (pip 22.3+ takes --python); else the venv's
  if "$PYTHON" -m pip --python "$PY" install -q --disable-pip-version-check uv >/dev/null 2>&1 \
     || { { has_pip || "$PY" -m ensurepip >/dev/null; } && "$PY" -m pip install -q --disable-pip-version-check uv; } >/dev/null 2>&1
  then
    echo "$VENV/bin/uv"
    return 0
  fi
  return 1
}

# Bytecode is compiled now, as pip does by default: where PYTHONDONTWRITEBYTECODE is set (as on
# this project's machines) nothing else ever writes it, and every process the tests start (some
# 150 services and CLI calls) compiled faststream, pydantic, ... again: about 1 s of CPU each.
if UV=$(find_uv) && "$UV" pip install --compile-bytecode --python "$PY" -e '.[test]'; then
  :
else
  echo "gpuledger: installing with pip (uv is not available or its install failed)"
  has_pip || "$PY" -m ensurepip >/dev/null
  "$PY" -m pip install --disable-pip-version-check --progress-bar on -e '.[test]'
fi
# gpuledger's own packages (an editable install compiles none of them): 0.2 s less per process
"$PY" -m compileall -q -j 0 schemas shared ledger services gpuledger_cli bench simulator >/dev/null
