#!/usr/bin/env bash
# scripts/device/prepare.sh — run on the development machine before a GPU-machine call: puts
# what the offline GPU machine needs into ignored folders that the call carries:
#   .whl/             the pinned nvidia-cutlass wheel (CuTe headers), flash-linear-attention wheels
#   .deps/googletest  GoogleTest source (the GPU image has no GoogleTest)
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl .deps
ls .whl/nvidia_cutlass-4.2.0.0-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps -d .whl nvidia-cutlass==4.2.0.0
# Peers for the GDN benchmarks (pure Python + Triton): flash-linear-attention and its deps.
ls .whl/fla_core-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps -d .whl flash-linear-attention fla-core einops
if [ ! -f .deps/googletest/CMakeLists.txt ]; then
  [ -d /usr/src/googletest ] || (apt-get update -qq && apt-get install -y -qq googletest) >/dev/null
  cp -r /usr/src/googletest .deps/googletest
fi
echo "prepared: carry [\".whl\", \".deps/googletest\"]"
