#!/usr/bin/env bash
# scripts/test.sh — set up, build, and run every test: the C++ suites (ctest; tests labelled "gpu"
# skip themselves without a CUDA device), then the Python package's tests (pytest; torch is
# installed into .venv/ when no python3 has it — scripts/setup_python.sh). ATTNKIT_SKIP_PYTHON=1
# runs the C++ suites only.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
if [ "${ATTNKIT_SKIP_PYTHON:-0}" != 1 ]; then
  py=$(bash scripts/setup_python.sh | tail -1)
  "$py" -m pytest -q tests/python --attnkit-lib "$BUILD_DIR/tools/libattnkit_c.so"
fi
