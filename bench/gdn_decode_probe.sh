#!/usr/bin/env bash
# bench/gdn_decode_probe.sh — build bench/gdn_decode_probe.cu from the decode kernel's own units
# (no CMake) and run it: bash bench/gdn_decode_probe.sh [B H [reps]]
# PROBE_DIR (default /tmp/gdn_decode_probe) keeps the build; PROBE_ONLY_BUILD=1 only builds;
# CUTLASS_INC as in gdn_chunk_probe.sh; PROBE_NVCC_FLAGS adds nvcc flags.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${PROBE_DIR:-/tmp/gdn_decode_probe}
mkdir -p "$dir"
cutlass=${CUTLASS_INC:-.deps/cutlass/cutlass_library/source/include}
[ -f "$cutlass/cute/tensor.hpp" ] || python3 -m pip install -q --no-index --no-deps --target .deps/cutlass .whl/nvidia_cutlass-*.whl
flags=(-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++17 -O3 ${PROBE_NVCC_FLAGS:-} -I. -Iinclude -I"$cutlass")
objs=() pids=()
for s in src/cuda/gdn/decode.cu src/api/checks.cpp src/cuda/runtime.cu bench/gdn_decode_probe.cu; do
  o="$dir/$(basename "$s").o"
  objs+=("$o")
  nvcc "${flags[@]}" -x cu -c "$s" -o "$o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
nvcc -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$dir/gdn_decode_probe"
[ -n "${PROBE_ONLY_BUILD:-}" ] || "$dir/gdn_decode_probe" "$@"
