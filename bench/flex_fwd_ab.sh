#!/bin/bash
# bench/flex_fwd_ab.sh — builds bench/flex_fwd_probe.cu once per flex forward variant.
#   bash bench/flex_fwd_ab.sh DIR NAME=REV...
#   PROBE=flex_bwd bash bench/flex_fwd_ab.sh DIR NAME=REV...   (the backward: bench/flex_bwd_probe.cu, and
#   the revision's dense D128 backward, which runs its no-mod case)
# A variant is a git revision's src/ and include/ (exported to DIR/NAME), with DIR/NAME.patch
# applied on top when that file exists. Its flex D128 bf16 kernel(s) and its flex dispatch are
# compiled from those sources and linked before build/libattnkit.a (a CUDA build of the tree:
# scripts/setup.sh), so each probe times that revision's kernel through the public API. Keep DIR in
# an ignored folder (.deps/flexab) and carry it to the device with the binaries DIR/probe_NAME.
# Logs with ptxas -v: DIR/build_NAME.log. PROBE_NVCC_FLAGS adds nvcc flags (e.g. -lineinfo, for ncu's source view).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1; shift
lib=build/libattnkit.a
cutlass=$PWD/.deps/cutlass/cutlass_library/source/include
[ -f $lib ] && [ -f $cutlass/cute/tensor.hpp ] || { echo "needs a CUDA build in build/ (scripts/setup.sh)" >&2; exit 1; }
flags="-std=c++17 -O3 -DNDEBUG -DATTNKIT_WITH_CUDA=1 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr ${PROBE_NVCC_FLAGS:-}"
mkdir -p "$dir"
pass=${PROBE:-flex_fwd}; pass=${pass#flex_}  # fwd or bwd
[ "$pass" = fwd ] || [ "$pass" = bwd ] || { echo "PROBE must be flex_fwd or flex_bwd" >&2; exit 1; }
nvcc $flags -Iinclude -c bench/flex_${pass}_probe.cu -o "$dir/probe.o"
build() {  # build NAME REV
  local v=$1 rev=$2 src="$dir/$1"
  rm -rf "$src" && mkdir -p "$src"
  git archive "$rev" src include | tar -x -C "$src"
  [ -f "$dir/$v.patch" ] && patch -s -d "$src" -p1 < "$dir/$v.patch"
  # The revision's D128 bf16 catalog kernels: the packed one too where it has one, so that the
  # decode rows never time the tree's library copy instead.
  local variants=CatalogVariant args=AttnFwdArgs
  [ $pass = bwd ] && variants=CatalogBwdVariant args=AttnBwdArgs
  [ $pass = fwd ] && grep -q CatalogPackedVariant "$src/src/cuda/flex/fwd_variant.cuh" && variants="$variants CatalogPackedVariant"
  { echo "#include \"src/cuda/attention/${pass}_launch.cuh\""
    echo "#include \"src/cuda/flex/${pass}_variant.cuh\""
    echo 'namespace attnkit::cuda::attn {'
    for k in $variants; do
      echo "template cudaError_t launch_${pass}<cutlass::bfloat16_t, 128, flex::$k>(const $args&, const flex::$k::Args&);"
    done
    # Since v20 the flex backward runs its no-mod cases on the softmax backward: that revision's
    # too, not the library's (a stale library's crashed the probe).
    [ $pass = bwd ] && grep -q launch_attention_bwd "$src/src/cuda/flex/bwd_dispatch.cu" &&
      echo "template cudaError_t launch_attention_bwd<cutlass::bfloat16_t, 128>(const AttnBwdArgs&);"
    echo '}'; } > "$src/kernel.cu"
  local inc="-I$src -I$src/include -I$cutlass"
  { nvcc $flags $inc -Xptxas -v -c "$src/kernel.cu" -o "$src/kernel.o" &&
    nvcc $flags $inc -c "$src/src/cuda/flex/${pass}_dispatch.cu" -o "$src/dispatch.o" &&
    nvcc -gencode=arch=compute_90a,code=sm_90a "$dir/probe.o" "$src/kernel.o" "$src/dispatch.o" $lib -o "$dir/probe_$v"; } \
    > "$dir/build_$v.log" 2>&1
}
for nv in "$@"; do build "${nv%%=*}" "${nv#*=}" & done
wait
for nv in "$@"; do
  v=${nv%%=*}
  echo "$v: $([ -x "$dir/probe_$v" ] && echo built || echo FAILED), $(grep -cE '[1-9][0-9]* bytes spill' "$dir/build_$v.log") kernels with spills"
done
