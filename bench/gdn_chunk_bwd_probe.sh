#!/usr/bin/env bash
# bench/gdn_chunk_bwd_probe.sh — build bench/gdn_chunk_bwd_probe.cu from the chunked GDN forward's
# and backward's own translation units (no CMake, no other kernels; they compile in parallel) and
# run it.
#   bash bench/gdn_chunk_bwd_probe.sh [B T H [reps [kept]] | check PREFIX]   (see gdn_chunk_bwd_probe.cu)
# PROBE_DIR (default /tmp/gdn_bwd_probe) keeps the build. VARIANT_INC, a folder of modified copies
# of tree headers at their tree paths, goes first on the include path: a variant builds beside the
# tree's in its own PROBE_DIR, and `check` dumps of the two compare with gdn_chunk_bwd_probe_cmp.py.
# Under ncu: PROBE_ONLY_BUILD=1 bash bench/gdn_chunk_bwd_probe.sh, then
# ncu ... $PROBE_DIR/gdn_chunk_bwd_probe B T H 1 [kept].
# CUTLASS_INC overrides the CuTe headers' folder (default .deps/cutlass/..., installed from .whl/).
# CMake builds the same program as the gdn_chunk_bwd_probe target.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${PROBE_DIR:-/tmp/gdn_bwd_probe}
mkdir -p "$dir"
cutlass=${CUTLASS_INC:-.deps/cutlass/cutlass_library/source/include}
[ -f "$cutlass/cute/tensor.hpp" ] || python3 -m pip install -q --no-index --no-deps --target .deps/cutlass .whl/nvidia_cutlass-*.whl
flags=(-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++20 -O3 ${VARIANT_INC:+-I"$VARIANT_INC"} -I. -Iinclude -I"$cutlass")
srcs=(src/cuda/gdn/chunk_fwd_dispatch.cu src/cuda/gdn/chunk_bwd_dispatch.cu src/cuda/gdn/bwd_dhu_dispatch.cu src/cuda/runtime.cu
      src/api/checks.cpp bench/gdn_chunk_bwd_probe.cu)
for hd in 64 128; do
  for e in bfloat16_t:bf16 half_t:fp16; do
    f="$dir/gdn_chunk_fwd_${e#*:}_hd$hd.cu"
    sed -e "s/@ELEMENT@/cutlass::${e%:*}/" -e "s/@HEAD_DIM@/$hd/" src/cuda/gdn/chunk_fwd_launch.cu.in >"$f"
    srcs+=("$f")
  done
  for t in chunk_bwd bwd_dhu; do
    f="$dir/gdn_${t}_hd$hd.cu"
    sed -e "s/@HEAD_DIM@/$hd/" src/cuda/gdn/${t}_launch.cu.in >"$f"
    srcs+=("$f")
  done
done
objs=() pids=()
for s in "${srcs[@]}"; do
  o="$dir/$(basename "$s").o"
  objs+=("$o")
  nvcc "${flags[@]}" -x cu -c "$s" -o "$o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done  # set -e: a failed unit stops here
nvcc -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$dir/gdn_chunk_bwd_probe"
[ -n "${PROBE_ONLY_BUILD:-}" ] || "$dir/gdn_chunk_bwd_probe" "$@"
