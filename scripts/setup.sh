#!/usr/bin/env bash
# One command from a fresh clone: a .venv with the pinned requirements (torch 2.13.0 CPU, no
# torchvision), Debian's chromium for the browser test when we may install it, then the main job:
# anonymize every face of the bundled group photo, offline.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -r requirements.txt
# These packages declare torchvision / GUI opencv / wandb as dependencies they do not need here.
.venv/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt
# The project itself (editable): `zoo`, `training`, `hub_cards` importable from anywhere, `face-deid-zoo` CLI.
.venv/bin/python -m pip install -q --no-deps -e .
# The privacy guard's independent face recognizers (npm package, MIT) and their parity tests' reference runtime.
bash scripts/fetch_recognizer.sh
# Real photos for the benchmarks (face_recognition 1.3.0's test photos, MIT, from its PyPI source archive); the
# benchmarks skip them, saying so, when this fails.
.venv/bin/python -m benchmarks.real_photos --fetch >/dev/null \
  || echo "note: benchmark photos could not be fetched; benchmarks run without them"

# Headless chromium for tests/test_browser.py (skipped there, with a reason, when absent).
if ! command -v chromium >/dev/null 2>&1 && [ "${ZOO_SKIP_CHROMIUM:-0}" != "1" ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "note: chromium could not be installed; the browser test will be skipped"
fi

# The main job, on the embedded default photo, with no network.
export HF_HUB_OFFLINE=1
# A baseline and a paper method (the bundled `personal` demo checkpoint; 042917 is its six-digit password),
# then recovery of the paper method's saved PNG with the same key.
.venv/bin/python -m zoo anonymize example:group --method blur,personal --key 042917 --out outputs/demo
.venv/bin/python -m zoo recover outputs/demo/group__personal.png --method personal --key 042917 --out outputs/demo
echo "setup done: anonymized and recovered photos with their JSON reports are in outputs/demo/"
