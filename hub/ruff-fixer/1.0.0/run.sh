#!/usr/bin/env bash
# ruff-fixer: fix what ruff can fix, then format. It claims nothing: the gate's
# `ruff check .` decides whether the work is done.
set -u
if ! command -v ruff >/dev/null 2>&1; then
  echo "ruff-fixer: ruff is not installed (pip install ruff)" >&2
  exit 127
fi
echo "ruff-fixer: fixing lint errors in $(pwd)"
ruff check --fix --exit-zero --quiet .
echo "ruff-fixer: formatting"
ruff format .
echo "ruff-fixer: what is left:"
ruff check --output-format concise . || true
