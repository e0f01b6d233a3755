#!/usr/bin/env bash
# scripts/device/run.sh — the whole GPU-machine job in one call: build for sm_90a, ptxas and SASS
# checks, GPU tests, compute-sanitizer, CPU tests, and attnkit-bench; logs go to $OUT.
# From the development machine (see docs/DEVICE.md):
#   bash scripts/device/prepare.sh
#   device run: command "bash scripts/device/run.sh", carry [".whl", ".deps/googletest"]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=build-device
status=0
step() {  # step NAME CMD...: run, log to $OUT/NAME.log, remember failures
  local name=$1; shift
  echo "== $name"
  if "$@" >"$OUT/$name.log" 2>&1; then echo "   ok"; else echo "   FAILED (rc=$?)"; status=1; tail -30 "$OUT/$name.log"; fi
}
{ nvidia-smi; nvcc --version; cmake --version; } >"$OUT/env.log" 2>&1
step build env BUILD_DIR=$BUILD_DIR JOBS=$(nproc) CMAKE_ARGS="-DATTNKIT_WITH_CUDA=ON -DATTNKIT_PTXAS_VERBOSE=ON" bash scripts/setup.sh
grep -E "spill|registers|C7510" "$OUT/build.log" | sort | uniq -c >"$OUT/ptxas.log" || true
if grep -q "C7510" "$OUT/build.log" || grep -E "[1-9][0-9]* bytes spill" "$OUT/build.log"; then echo "   ptxas: spills or C7510 found"; status=1; fi
for o in $(find $BUILD_DIR -name "*.cu.o"); do
  echo "$o: $(cuobjdump -sass "$o" 2>/dev/null | grep -c HGMMA) HGMMA" >>"$OUT/ptxas.log"  # SASS check
done
step gpu-tests ctest --test-dir $BUILD_DIR -L gpu --output-on-failure
grep -E "Skipped|skipped" "$OUT/gpu-tests.log" && { echo "   GPU tests were skipped on a GPU machine"; status=1; }
step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/wgmma_smoke_test
step cpu-tests ctest --test-dir $BUILD_DIR -L cpu -j "$(nproc)" --output-on-failure
step bench $BUILD_DIR/tools/attnkit-bench --json "$OUT/bench.jsonl"
cat "$OUT/bench.log"
exit $status
