#!/usr/bin/env bash
# scripts/cutlass_headers.sh — the pinned nvidia-cutlass wheel's CuTe headers into .deps/cutlass
# (from .whl/ when offline, as on the GPU machine; else from PyPI), unless already there. Called
# by scripts/setup.sh and scripts/setup_python.sh whenever they build the CUDA kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
CUTLASS_VERSION=4.2.0.0
if [ ! -f .deps/cutlass/cutlass_library/source/include/cute/tensor.hpp ]; then
  echo "setup: installing nvidia-cutlass==$CUTLASS_VERSION headers into .deps/cutlass" >&2
  if [ -d .whl ] && ls .whl/nvidia_cutlass-*.whl >/dev/null 2>&1; then  # offline (device machine)
    python3 -m pip install -q --no-index --no-deps --target .deps/cutlass .whl/nvidia_cutlass-*.whl >&2
  else
    python3 -m pip install -q --no-deps --target .deps/cutlass "nvidia-cutlass==$CUTLASS_VERSION" >&2
  fi
fi
