#!/bin/bash
# bench/attention_fwd_ab.sh — builds bench/attention_fwd_probe.cu once per variant, in parallel.
#   bash bench/attention_fwd_ab.sh DIR NAME...
#   PROBE=attention_bwd_probe bash bench/attention_fwd_ab.sh DIR NAME...   (the backward's probe)
# PROBE_NVCC_FLAGS adds nvcc flags (e.g. -lineinfo, for ncu's source view).
# A variant is a folder DIR/NAME holding modified copies of tree files at their tree paths (e.g.
# DIR/NAME/src/cuda/attention/fwd_consumer.cuh); it is put first on the include path, so its
# copies shadow the tree's. An empty variant is the tree itself. Keep DIR in an ignored folder
# (.deps/ab) and carry it to the device with the binaries DIR/probe_NAME built here: nothing needs
# compiling there. Logs with ptxas -v: DIR/build_NAME.log.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1; shift
probe=${PROBE:-attention_fwd_probe}
cutlass=.deps/cutlass/cutlass_library/source/include
[ -f $cutlass/cute/tensor.hpp ] || { echo "no CuTe headers: run scripts/setup.sh first" >&2; exit 1; }
for v in "$@"; do
  mkdir -p "$dir/$v"
  nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I"$dir/$v" -I. -Iinclude -I$cutlass \
    -Xptxas -v ${PROBE_NVCC_FLAGS:-} "bench/$probe.cu" -o "$dir/probe_$v" >"$dir/build_$v.log" 2>&1 &
done
wait
for v in "$@"; do
  echo "$v: $(grep -cE '[1-9][0-9]* bytes spill' "$dir/build_$v.log") kernels with spills, $(grep -c C75 "$dir/build_$v.log") C75xx"
done
