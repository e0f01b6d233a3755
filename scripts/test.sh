#!/usr/bin/env bash
# scripts/test.sh — set up, build, and run every test. Tests labelled "gpu" skip themselves when
# no CUDA device is present; everything else runs on any machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
