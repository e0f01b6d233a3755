#!/usr/bin/env bash
# scripts/setup.sh — everything a fresh machine needs, then configure and build.
#   BUILD_DIR (default build), CMAKE_ARGS (extra -D options), JOBS (default: all cores).
# Installs the pinned nvidia-cutlass wheel (CuTe headers) into .deps/ when nvcc is present
# (scripts/cutlass_headers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

need() { command -v "$1" >/dev/null 2>&1 || { echo "setup: '$1' is required but not found" >&2; exit 1; }; }
need cmake
need g++

# GoogleTest: the system package, else source in .deps/googletest, else try Debian's package.
if [ ! -d /usr/lib/x86_64-linux-gnu/cmake/GTest ] && [ ! -d /usr/local/lib/cmake/GTest ] \
   && [ ! -d /usr/lib/cmake/GTest ] && [ ! -f .deps/googletest/CMakeLists.txt ] \
   && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing GoogleTest (libgtest-dev)"
  (apt-get update -qq && apt-get install -y -qq libgtest-dev) >/dev/null || echo "setup: could not install GoogleTest" >&2
fi

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
  bash scripts/cutlass_headers.sh
fi

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
