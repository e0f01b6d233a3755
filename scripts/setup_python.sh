#!/usr/bin/env bash
# scripts/setup_python.sh — a Python with torch, and the attnkit package pip-built against that
# torch (python/, pyproject.toml). Its last line of output is the interpreter to use.
#   ATTNKIT_PYTHON  use this interpreter (it must import torch); else python3 when it has torch,
#                   else a virtual environment .venv/ with torch==$TORCH_VERSION from PyPI.
#   ATTNKIT_PY_CMAKE_ARGS  extra CMake options for the package's build (CMAKE_ARGS, meant for the
#                   main build, is not passed on). Without a GPU the package is built without the
#                   CUDA kernels (the main build compiles those) unless these options say otherwise.
# Offline (the GPU machine) the build backend comes from .whl/ (scripts/device/prepare.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=2.11.0

py=${ATTNKIT_PYTHON:-}
if [ -z "$py" ]; then
  if python3 -c "import torch" >/dev/null 2>&1; then
    py=python3
  else
    [ -x .venv/bin/python ] || python3 -m venv .venv
    py=$PWD/.venv/bin/python
    if ! "$py" -c "import torch" >/dev/null 2>&1; then
      echo "setup_python: installing torch==$TORCH_VERSION into .venv (several GB)" >&2
      "$py" -m pip install -q "torch==$TORCH_VERSION" >&2
    fi
  fi
fi

if ! "$py" -c "import scikit_build_core" >/dev/null 2>&1; then
  if ls .whl/scikit_build_core-*.whl >/dev/null 2>&1; then  # offline: only for this build
    "$py" -m pip install -q --no-index --no-deps --target /tmp/attnkit-build-site \
      .whl/scikit_build_core-*.whl .whl/pathspec-*.whl .whl/packaging-*.whl >&2
    export PYTHONPATH=/tmp/attnkit-build-site${PYTHONPATH:+:$PYTHONPATH}
  else
    "$py" -m pip install -q "scikit-build-core>=0.10" >&2
  fi
fi
"$py" -c "import pytest" >/dev/null 2>&1 || "$py" -m pip install -q pytest >&2

gpu_args="-DATTNKIT_WITH_CUDA=OFF"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu_args="-DATTNKIT_WITH_CUDA=ON"; fi
if [[ "$gpu_args ${ATTNKIT_PY_CMAKE_ARGS:-}" == *"ATTNKIT_WITH_CUDA=ON"* ]]; then bash scripts/cutlass_headers.sh; fi
echo "setup_python: pip install --no-build-isolation . ($gpu_args ${ATTNKIT_PY_CMAKE_ARGS:-})" >&2
CMAKE_ARGS="$gpu_args ${ATTNKIT_PY_CMAKE_ARGS:-}" CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} \
  "$py" -m pip install -q --no-build-isolation --no-deps . >&2
echo "$py"
