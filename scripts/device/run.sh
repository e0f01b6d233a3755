#!/usr/bin/env bash
# scripts/device/run.sh — the whole GPU-machine job in one call: build for sm_90a, ptxas and SASS
# checks, GPU and CPU tests, compute-sanitizer, attnkit-bench and the peer benchmarks; logs to $OUT.
# From the development machine (see docs/DEVICE.md):
#   bash scripts/device/prepare.sh
#   device run: command "bash scripts/device/run.sh", carry [".whl", ".deps/googletest"]
# STEPS (default "build test python memcheck bench"; also "bench-fwd", "bench-bwd", "bench-gdn", "bench-chunk", "bench-chunk-bwd", "bench-dhu", "bench-flex", "pack-ops") selects steps; TEST_REGEX narrows the GPU tests (ctest -R; not GTEST_FILTER, which GoogleTest itself reads).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out}
STEPS=${STEPS:-build test python memcheck bench}
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
BUILD_DIR=build-device
status=0
has() { [[ " $STEPS " == *" $1 "* ]]; }
step() {  # step LOG CMD...: run, append to $OUT/LOG, remember failures
  local log=$1; shift
  echo "== $*" | cut -c1-160
  if "$@" >>"$OUT/$log" 2>&1; then echo "   ok"; else echo "   FAILED (rc=$?)"; status=1; tail -40 "$OUT/$log"; fi
}
# The build step also builds the PyTorch op library (ATTNKIT_WITH_TORCH=ON: the CMake the pip
# package runs) where python3 has torch, unless TORCH_OPS=0; the benchmark steps then load it from
# $BUILD_DIR/python through ATTNKIT_TORCH_LIBRARY (python/attnkit/_library.py) instead of
# pip-building the package and every kernel a second time (~5 minutes of device time). The
# `python` step still pip-builds the package: it tests the package as users install it.
TORCH_OPS=${TORCH_OPS:-1}
[ "$TORCH_OPS" = 1 ] && python3 -c "import torch" >/dev/null 2>&1 || TORCH_OPS=0
OPS_LIB=$PWD/$BUILD_DIR/python/libattnkit_torch.so
PY=""  # the pip-built package's interpreter, set by the first py_step
py_step() {  # py_step LOG ARGS...: step with the package's Python; scripts/setup_python.sh runs once a run
  local log=$1; shift
  if [ -z "$PY" ]; then
    echo "== bash scripts/setup_python.sh (pip-builds the package with its CUDA kernels, once)"
    PY=$(bash scripts/setup_python.sh 2>>"$OUT/$log" | tail -1)
    if [ -z "$PY" ]; then echo "   FAILED"; status=1; tail -40 "$OUT/$log"; return; fi
  fi
  step "$log" "$PY" "$@"
}
bench_py_step() {  # bench_py_step LOG ARGS...: the build's op library where it has one, else py_step
  local log=$1; shift
  if [ -z "$PY" ] && [ -f "$OPS_LIB" ]; then
    echo "   (the op library of $BUILD_DIR, python/ on PYTHONPATH: no pip build)"
    step "$log" env PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" ATTNKIT_TORCH_LIBRARY="$OPS_LIB" python3 "$@"
  else
    py_step "$log" "$@"
  fi
}
if has build; then
  { nvidia-smi; nvcc --version; cmake --version; } >"$OUT/build.log" 2>&1
  step build.log env BUILD_DIR=$BUILD_DIR JOBS=$(nproc) CMAKE_ARGS="-DATTNKIT_WITH_CUDA=ON -DATTNKIT_PTXAS_VERBOSE=ON -DATTNKIT_WITH_TORCH=$([ $TORCH_OPS = 1 ] && echo ON || echo OFF)" bash scripts/setup.sh
  grep -E "spill|registers|C75[0-9][0-9]|Compiling entry" "$OUT/build.log" >"$OUT/ptxas.log" || true
  # Spills and C75xx (WGMMA serialization) per kernel, named by ptxas's "Function properties for"
  # line just before each spill count. A test's own functor instantiations (namespace
  # attnkit::test: "4test" in the mangled name) are reported without failing the step: they are
  # not library kernels.
  flagged=$(awk '/Function properties for/ { name = $NF }
                 /[1-9][0-9]* bytes spill/ { print (name ~ /4test/ ? "test-only " : "library ") name ": " $0 }
                 /C75[0-9][0-9]/ { print ($0 ~ /4test/ ? "test-only " : "library ") $0 }' "$OUT/build.log")
  if [ -n "$flagged" ]; then echo "$flagged" >>"$OUT/ptxas.log"; fi
  if echo "$flagged" | grep -q "^library"; then
    echo "   ptxas: spills or C75xx in library kernels (see the end of ptxas.log)"; status=1
  elif [ -n "$flagged" ]; then
    echo "   ptxas: spills or C75xx in $(echo "$flagged" | grep -c .) test-only instantiation(s), no library kernel (see the end of ptxas.log)"
  fi
  for o in $(find $BUILD_DIR -name "*.cu.o"); do  # SASS check
    echo "$o: $(cuobjdump -sass "$o" 2>/dev/null | grep -c HGMMA) HGMMA, $(cuobjdump -sass "$o" 2>/dev/null | grep -cE 'LDL|STL') local-memory ops" >>"$OUT/ptxas.log"
  done
fi
# pack-ops: the build's op library, gzipped in 15 MB pieces ($OUT/ops.so.gz.NN: at most 16 MiB a
# file comes back), so that a later call can carry it (scripts/device/ops_from_pieces.sh) and run
# the torch-op benchmarks without building again (the build is most of a call's 10 minutes).
if has pack-ops && [ -f "$OPS_LIB" ]; then
  ldd "$OPS_LIB" >"$OUT/ops_ldd.txt" 2>&1
  gzip -1 -c "$OPS_LIB" | split -b 15M -d - "$OUT/ops.so.gz."
  ls -l "$OUT"/ops.so.gz.* | tee -a "$OUT/ops_ldd.txt"
fi
if has test; then
  step tests.log ctest --test-dir $BUILD_DIR -L gpu --output-on-failure --timeout ${TEST_TIMEOUT:-300} ${TEST_REGEX:+-R "$TEST_REGEX"}
  if grep -q "(Skipped)" "$OUT/tests.log"; then echo "   GPU tests were skipped on a GPU machine"; status=1; fi
  if grep -q "No tests were found" "$OUT/tests.log"; then echo "   ctest found no tests (stale discovery? rm -rf $BUILD_DIR)"; status=1; fi
  step tests.log ctest --test-dir $BUILD_DIR -L cpu -j "$(nproc)"
fi
if has python; then  # the pip-built package (CUDA kernels included) and every Python test
  py_step python.log -m pytest -q -rs tests/python --attnkit-lib $BUILD_DIR/tools/libattnkit_c.so
  tail -5 "$OUT/python.log"
fi
if has memcheck; then
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/wgmma_smoke_test
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/attention_gpu_test \
    --gtest_filter='AttentionGpu.VarlenWithOneTokenAndEmptySequences'
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/flex_gpu_test \
    --gtest_filter='FlexGpu.UnlistedBlocksSkippedAndFullBlocksSkipMaskMod:FlexGpu.UnsupportedBlockSizesAreRefused:FlexGpu.ShortQueriesSplitKvMatchesFullPath'
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/flex_custom_gpu_test
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/flex_query_lists_gpu_test
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/flex_bwd_gpu_test \
    --gtest_filter='FlexBwdGpu.UnlistedBlocksSkippedAndFullBlocksSkipMaskMod:FlexBwdGpu.UnsupportedBlockSizesAreRefused:FlexBwdGpu.GqaRatiosFp16AndWideBlocks'
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/attention_bwd_gpu_test \
    --gtest_filter='AttentionBwdGpu.VarlenWithOneTokenAndEmptySequences:AttentionBwdGpu.HeadDimsAndAwkwardLengths'
  # Not the 8500-sequence case (~70k CTAs) nor the 2^31-element ones (26 GB): minutes under memcheck.
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/gdn_gpu_test \
    --gtest_filter='-GdnChunkGpu.ThousandsOfShortSequences:GdnChunkGpu.ActivationsPast2To31*'
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/gdn_bwd_dhu_gpu_test \
    --gtest_filter='-GdnBwdDhuGpu.ThousandsOfShortSequences'
  step memcheck.log compute-sanitizer --tool memcheck --error-exitcode 1 $BUILD_DIR/tests/cpp/gdn_chunk_bwd_gpu_test \
    --gtest_filter='GdnChunkBwdGpu.VarlenWithShortAndEmptySequencesAndGva:GdnChunkBwdGpu.InOpOptionsAndVFirstLayout'
fi
# FLA's Triton autotuning (its kernels' cache_results) takes ~3.5 minutes a shape on a cold machine: the
# results (*.autotune.json, a few KB) come back as $OUT/fla-autotune-GPU.tgz after every FLA bench;
# kept here under .deps/fla-autotune/ and carried, a later call restores them and compiles only the
# chosen configs. Per GPU name, so an H100's choices never time FLA on an H200.
gpu_slug() { nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr -c 'A-Za-z0-9\n' '-' | tr -d '\n'; }
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/.deps/triton-cache}
fla_wheels() {  # flash-linear-attention, from the wheels scripts/device/prepare.sh put in .whl/
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/fla_core-*.whl .whl/flash_linear_attention-*.whl \
    .whl/einops-*.whl >>"$OUT/bench.log" 2>&1
  local saved=.deps/fla-autotune/$(gpu_slug).tgz
  [ -f "$saved" ] || saved=bench/fla-autotune/$(gpu_slug).tgz  # committed: an H200's (2026-11-28)
  if [ -f "$saved" ]; then mkdir -p "$TRITON_CACHE_DIR" && tar xzf "$saved" -C "$TRITON_CACHE_DIR" \
    && echo "   (FLA's autotuning results restored from $saved)"; fi
}
pack_fla_autotune() {  # the autotuning results of this machine's cache, for .deps/fla-autotune/
  [ -d "$TRITON_CACHE_DIR" ] || return 0
  local files; files=$(cd "$TRITON_CACHE_DIR" && find . -name '*.autotune.json')
  [ -n "$files" ] && (cd "$TRITON_CACHE_DIR" && echo "$files" | tar czf "$OUT/fla-autotune-$(gpu_slug).tgz" -T -)
  return 0
}
if has bench-bwd && ! has bench; then
  step bench.log python3 bench/bench_attention_bwd.py --lib $BUILD_DIR/tools/libattnkit_c.so --out "$OUT" ${BENCH_ARGS:-}
  cat "$OUT/bench.log"
fi
if has bench-fwd && ! has bench; then
  step bench.log python3 bench/bench_attention.py --lib $BUILD_DIR/tools/libattnkit_c.so --out "$OUT" ${BENCH_ARGS:-}
  cat "$OUT/bench.log"
fi
if has bench-gdn && ! has bench; then
  fla_wheels
  step bench.log python3 bench/bench_gdn_decode.py --lib $BUILD_DIR/tools/libattnkit_c.so --out "$OUT"
  cat "$OUT/bench.log"
fi
if has bench-chunk || has bench; then  # the GDN chunked forward through the torch op (the pip-built package)
  fla_wheels
  bench_py_step bench.log bench/bench_gdn_chunk.py --out "$OUT" ${BENCH_ARGS:-}
  has bench || cat "$OUT/bench.log"
fi
if has bench-chunk-bwd || has bench; then  # GDN chunked forward + backward through autograd, FLA's beside it
  fla_wheels
  bench_py_step bench.log bench/bench_gdn_chunk_bwd.py --out "$OUT" ${BENCH_ARGS:-}
  has bench || cat "$OUT/bench.log"
fi
if has bench-dhu || has bench; then  # the GDN reverse state-gradient pass through the torch op, FLA's beside it
  fla_wheels
  bench_py_step bench.log bench/bench_gdn_bwd_dhu.py --out "$OUT"
  has bench || cat "$OUT/bench.log"
fi
if has bench-flex || has bench; then  # flex attention through the torch op, torch.compile(flex_attention) beside it
  bench_py_step bench.log bench/bench_flex.py --out "$OUT" ${BENCH_ARGS:-}
  has bench || cat "$OUT/bench.log"
fi
if has bench; then
  step bench.log $BUILD_DIR/tools/attnkit-bench
  step bench.log python3 bench/bench_attention.py --lib $BUILD_DIR/tools/libattnkit_c.so --out "$OUT" ${BENCH_ARGS:-}
  step bench.log python3 bench/bench_attention_bwd.py --lib $BUILD_DIR/tools/libattnkit_c.so --out "$OUT" ${BENCH_ARGS:-}
  step bench.log python3 bench/bench_gdn_decode.py --lib $BUILD_DIR/tools/libattnkit_c.so --out "$OUT"
  cat "$OUT/bench.log"
fi
pack_fla_autotune
exit $status
