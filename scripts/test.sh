#!/usr/bin/env bash
# The test suite, offline.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest -q tests "$@"
