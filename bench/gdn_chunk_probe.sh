#!/usr/bin/env bash
# bench/gdn_chunk_probe.sh — build one of the GDN probes from the chunked GDN kernels' own
# translation units (no CMake, no other kernels; they compile in parallel) and run it:
#   bash bench/gdn_chunk_probe.sh [B T H [reps [dump]] | check PREFIX]
#       bench/gdn_chunk_probe.cu, the forward (~1 minute on the device)
#   PROBE=bwd bash bench/gdn_chunk_probe.sh [B T H [reps [kept]] | check PREFIX]
#       bench/gdn_chunk_bwd_probe.cu, the backward (its units and the forward's)
# PROBE_DIR (default /tmp/gdn_probe, /tmp/gdn_bwd_probe) keeps the build. A second revision
# exported to another folder builds beside it with its own PROBE_DIR and CUTLASS_INC=<this
# checkout's .deps/cutlass/...>; or VARIANT_INC, a folder of modified copies of tree headers at
# their tree paths, goes first on the include path. `check` dumps of two builds compare with
# gdn_chunk_probe_cmp.py / gdn_chunk_bwd_probe_cmp.py.
# CMake builds the same programs as the gdn_chunk_probe / gdn_chunk_bwd_probe targets.
# Under ncu: PROBE_ONLY_BUILD=1 bash bench/gdn_chunk_probe.sh, then ncu ... $PROBE_DIR/<program> B T H 1
# CUTLASS_INC overrides the CuTe headers' folder (default .deps/cutlass/..., installed from .whl/).
# PROBE_JOBS caps the units compiled at once (default: all; 2 on a 2-core, 24 GB machine).
# PROBE_NVCC_FLAGS adds nvcc flags (e.g. -lineinfo, for ncu's source view). The forward probe
# reads PROBE_SEGMENTS at run time: GdnFwdParams::num_segments (0, automatic, when unset).
set -euo pipefail
cd "${PROBE_SRC:-$(dirname "$0")/..}"  # PROBE_SRC: another checkout's tree to build (gdn_chunk_probe_revs.sh)
probe=${PROBE:-fwd}
[ "$probe" = fwd ] || [ "$probe" = bwd ] || { echo "PROBE: expected fwd or bwd, got '$probe'" >&2; exit 2; }
program=$([ "$probe" = fwd ] && echo gdn_chunk_probe || echo gdn_chunk_bwd_probe)
dir=${PROBE_DIR:-/tmp/$([ "$probe" = fwd ] && echo gdn_probe || echo gdn_bwd_probe)}
mkdir -p "$dir"
cutlass=${CUTLASS_INC:-.deps/cutlass/cutlass_library/source/include}
[ -f "$cutlass/cute/tensor.hpp" ] || python3 -m pip install -q --no-index --no-deps --target .deps/cutlass .whl/nvidia_cutlass-*.whl
flags=(-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -std=c++17 -O3 ${PROBE_NVCC_FLAGS:-} ${VARIANT_INC:+-I"$VARIANT_INC"} -I. -Iinclude -I"$cutlass")
srcs=(src/cuda/gdn/chunk_fwd_dispatch.cu src/api/checks.cpp src/cuda/runtime.cu "bench/$program.cu")
[ "$probe" = bwd ] && srcs+=(src/cuda/gdn/chunk_bwd_dispatch.cu src/cuda/gdn/bwd_dhu_dispatch.cu)
for hd in 64 128; do
  for e in bfloat16_t:bf16 half_t:fp16; do
    f="$dir/gdn_chunk_fwd_${e#*:}_hd$hd.cu"
    sed -e "s/@ELEMENT@/cutlass::${e%:*}/" -e "s/@HEAD_DIM@/$hd/" src/cuda/gdn/chunk_fwd_launch.cu.in >"$f"
    srcs+=("$f")
  done
  if [ "$probe" = bwd ]; then
    for t in chunk_bwd bwd_dhu; do
      f="$dir/gdn_${t}_hd$hd.cu"
      sed -e "s/@HEAD_DIM@/$hd/" src/cuda/gdn/${t}_launch.cu.in >"$f"
      srcs+=("$f")
    done
  fi
done
objs=() pids=()
jobs_max=${PROBE_JOBS:-${#srcs[@]}}  # all at once by default (the device); fewer on a small machine
for s in "${srcs[@]}"; do
  o="$dir/$(basename "$s").o"
  objs+=("$o")
  if [ "${#pids[@]}" -ge "$jobs_max" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  nvcc "${flags[@]}" -x cu -c "$s" -o "$o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done  # set -e: a failed unit stops here
nvcc -gencode=arch=compute_90a,code=sm_90a "${objs[@]}" -o "$dir/$program"
[ -n "${PROBE_ONLY_BUILD:-}" ] || "$dir/$program" "$@"
