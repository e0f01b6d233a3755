#!/usr/bin/env bash
# bench/gdn_chunk_probe.sh — build bench/gdn_chunk_probe.cu from the chunked GDN forward's own
# translation units (no CMake, no other kernels: ~1 minute on the device) and run it.
#   bash bench/gdn_chunk_probe.sh [B T H [reps [dump]] | check PREFIX]   (see gdn_chunk_probe.cu)
# PROBE_DIR (default /tmp/gdn_probe) keeps the build. A second revision exported to another folder
# builds beside it with its own PROBE_DIR and CUTLASS_INC=<this checkout's .deps/cutlass/...>.
# CMake builds the same program as the gdn_chunk_probe target.
# Under ncu: PROBE_ONLY_BUILD=1 bash bench/gdn_chunk_probe.sh, then ncu ... $PROBE_DIR/gdn_chunk_probe B T H 1
# CUTLASS_INC overrides the CuTe headers' folder (default .deps/cutlass/..., installed from .whl/).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${PROBE_DIR:-/tmp/gdn_probe}
mkdir -p "$dir"
cutlass=${CUTLASS_INC:-.deps/cutlass/cutlass_library/source/include}
[ -f "$cutlass/cute/tensor.hpp" ] || python3 -m pip install -q --no-index --no-deps --target .deps/cutlass .whl/nvidia_cutlass-*.whl
flags=(-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++17 -O3 -I. -Iinclude -I"$cutlass")
srcs=(src/cuda/gdn/chunk_fwd_dispatch.cu src/api/checks.cpp bench/gdn_chunk_probe.cu)
for e in bfloat16_t:bf16 half_t:fp16; do
  for hd in 64 128; do
    f="$dir/gdn_chunk_fwd_${e#*:}_hd$hd.cu"
    sed -e "s/@ELEMENT@/cutlass::${e%:*}/" -e "s/@HEAD_DIM@/$hd/" src/cuda/gdn/chunk_fwd_launch.cu.in >"$f"
    srcs+=("$f")
  done
done
objs=()
for s in "${srcs[@]}"; do
  o="$dir/$(basename "$s").o"
  objs+=("$o")
  nvcc "${flags[@]}" -x cu -c "$s" -o "$o" &
done
wait
nvcc -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$dir/gdn_chunk_probe"
[ -n "${PROBE_ONLY_BUILD:-}" ] || "$dir/gdn_chunk_probe" "$@"
