#!/usr/bin/env bash
# scripts/bench.sh — set up, build, and run attnkit-bench (the main job). Without a GPU it runs
# the CPU reference backend on a small example and says that no GPU was found.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh >/dev/null
"$BUILD_DIR/tools/attnkit-bench" "$@"
