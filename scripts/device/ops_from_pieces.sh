#!/usr/bin/env bash
# scripts/device/ops_from_pieces.sh DIR — on the development machine: the op library's pieces that a
# `STEPS="build ... pack-ops"` call brought back (DIR/ops.so.gz.NN) joined into .deps/ops/ops.so.gz,
# for later calls to carry: their command starts with
#   mkdir -p build-device/python && gunzip -c .deps/ops/ops.so.gz > build-device/python/libattnkit_torch.so
# and run.sh's torch-op benchmark steps then load that library (no build; the device machines
# have the same torch at the same path, which the library's RUNPATH names).
set -euo pipefail
dir=${1:?usage: $0 DIR (the folder the files came back to)}
mkdir -p .deps/ops
cat "$dir"/ops.so.gz.* > .deps/ops/ops.so.gz
gzip -t .deps/ops/ops.so.gz
ls -l .deps/ops/ops.so.gz
