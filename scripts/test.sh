#!/usr/bin/env bash
# Lint (ruff check + format check), type check (mypy, the modules pyproject.toml lists), then the test suite, offline. With no arguments: the routine run (tests
# marked `slow` left out; pytest 253 s on a clean CI clone on 2 cores). `bash scripts/test.sh -m slow` runs the slow ones; CI runs both.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
if [ "$#" -eq 0 ]; then
  set -- -m "not slow"
fi
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy --no-error-summary
exec .venv/bin/python -m pytest -q tests "$@"
