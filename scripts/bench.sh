#!/usr/bin/env bash
# scripts/bench.sh — set up, build, and run the main job. Without a GPU: attnkit-bench runs the CPU
# reference backend on a small example and says that no GPU was found. With one: attnkit-bench's
# GPU rows, then the benchmarks beside the peers in one process each (torch SDPA cuDNN / flash for
# attention, flash-linear-attention for the GDN decode, chunked forward, forward + backward and
# bwd_dhu, torch.compile(flex_attention)
# for flex attention), JSON lines to $BENCH_OUT (default out/).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BENCH_OUT=${BENCH_OUT:-out}
bash scripts/setup.sh >/dev/null
"$BUILD_DIR/tools/attnkit-bench" "$@"
if nvidia-smi -L >/dev/null 2>&1; then
  if ! python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    echo "bench.sh: a GPU is present but python3 has no CUDA torch: the peer benchmarks need it"
    exit 0
  fi
  mkdir -p "$BENCH_OUT"
  lib="$BUILD_DIR/tools/libattnkit_c.so"
  # flash-linear-attention (pure Python + Triton) into .deps/fla, from .whl/ when offline
  fla_site=.deps/fla
  if ! python3 -c "import fla" >/dev/null 2>&1 && [ ! -d "$fla_site/fla" ]; then
    if ls .whl/fla_core-*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --target "$fla_site" .whl/fla_core-*.whl \
        .whl/flash_linear_attention-*.whl .whl/einops-*.whl
    else
      python3 -m pip install -q --no-deps --target "$fla_site" flash-linear-attention==0.6.0 fla-core==0.6.0 einops ||
        echo "bench.sh: could not install flash-linear-attention"
    fi
  fi
  if PYTHONPATH="$fla_site${PYTHONPATH:+:$PYTHONPATH}" python3 -c "import fla" >/dev/null 2>&1; then
    PYTHONPATH="$fla_site${PYTHONPATH:+:$PYTHONPATH}" python3 bench/bench_gdn_decode.py --lib "$lib" --out "$BENCH_OUT"
    # the chunked forward goes through the torch op: the pip-built package (scripts/setup_python.sh)
    py=$(bash scripts/setup_python.sh | tail -1)
    PYTHONPATH="$fla_site${PYTHONPATH:+:$PYTHONPATH}" "$py" bench/bench_gdn_chunk.py --out "$BENCH_OUT"
    PYTHONPATH="$fla_site${PYTHONPATH:+:$PYTHONPATH}" "$py" bench/bench_gdn_chunk_bwd.py --out "$BENCH_OUT"
    PYTHONPATH="$fla_site${PYTHONPATH:+:$PYTHONPATH}" "$py" bench/bench_gdn_bwd_dhu.py --out "$BENCH_OUT"
  else
    echo "bench.sh: flash-linear-attention is not available; the GDN peer benchmarks are skipped"
  fi
  python3 bench/bench_attention.py --lib "$lib" --out "$BENCH_OUT"
  python3 bench/bench_attention_bwd.py --lib "$lib" --out "$BENCH_OUT"
  # flex attention goes through the torch op as well (the pip-built package)
  py=$(bash scripts/setup_python.sh | tail -1)
  "$py" bench/bench_flex.py --out "$BENCH_OUT"
fi
