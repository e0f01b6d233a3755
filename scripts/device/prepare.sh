#!/usr/bin/env bash
# scripts/device/prepare.sh — run on the development machine before a GPU-machine call: puts
# what the offline GPU machine needs into ignored folders that the call carries:
#   .whl/             the pinned nvidia-cutlass wheel (CuTe headers), flash-linear-attention wheels,
#                     scikit-build-core and its needs (to pip-install the attnkit package offline)
#   .deps/googletest  GoogleTest source (the GPU image has no GoogleTest)
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl .deps
ls .whl/nvidia_cutlass-4.2.0.0-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps -d .whl nvidia-cutlass==4.2.0.0
# Peers for the GDN benchmarks (pure Python + Triton): flash-linear-attention and its deps.
ls .whl/fla_core-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps -d .whl flash-linear-attention fla-core einops
# The Python package's build backend (scripts/setup_python.sh installs it from here when offline).
ls .whl/scikit_build_core-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps -d .whl \
  scikit-build-core==1.1.2 pathspec==1.1.1 packaging==25.0
if [ ! -f .deps/googletest/CMakeLists.txt ]; then
  [ -d /usr/src/googletest ] || (apt-get update -qq && apt-get install -y -qq googletest) >/dev/null
  cp -r /usr/src/googletest .deps/googletest
fi
echo "prepared: carry [\".whl\", \".deps/googletest\"]"
