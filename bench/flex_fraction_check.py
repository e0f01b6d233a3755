"""bench/flex_fraction_check.py — how bench_flex.py's "fraction of dense" depends on when the dense
row is timed. bench_flex.py times attnkit's dense (noop) row once, first, and divides every sparse
case's TFLOP/s by it; the sparse rows run seconds later, after the heavier rows. Here each sparse
case is timed right between two dense timings (dense, sparse, dense, ... in alternation), with the
SM clock and board power read after each timing, so that the ratio compares the two kernels under
the same conditions. Same timer as bench_flex.py (triton do_bench, median, L2 flushed before each
launch); also a plain back-to-back loop of CUDA events (no flush) for comparison.

    python3 bench/flex_fraction_check.py [--out DIR] [--pairs N]

A diagnostic, not the benchmark of record (bench_flex.py is): it has no peer.
"""
import argparse, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.nn.attention.flex_attention import create_block_mask
from triton.testing import do_bench

import attnkit
from bench_attention import device_meta, write_rows
from bench_flex import D, H, backward_of, mask_mods


def gpu_state():
    """(SM clock MHz, board power W) right now, or (nan, nan)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout.strip().split(",")
        return float(out[0]), float(out[1])
    except (OSError, ValueError, IndexError):
        return float("nan"), float("nan")


def events_ms(fn, reps=100):
    """Median of back-to-back launches timed one by one with CUDA events (no L2 flush)."""
    for _ in range(10):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    dev, S, B = "cuda", 16384, 1
    meta = device_meta()
    torch.manual_seed(0)
    q, k, v, dout = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(4))
    mods = mask_mods(S, dev)
    masks = [(name, mods[name]) for name in ("causal", "sliding1024", "document_causal")]
    dense_fwd = lambda: attnkit.flex_attention(q, k, v)
    dense_bwd, _ = backward_of(lambda *t: attnkit.flex_attention(*t), q, k, v, dout)
    dense_fl = 4 * B * H * S * S * D
    rows = []
    print(f"{'case':16} {'pass':4} {'timer':7} {'dense ms':>9} {'case ms':>9} {'fraction':>9}  clocks MHz / power W")
    for name, mm in masks:
        bm = create_block_mask(mm, B, None, S, S, device=dev)
        density = 1.0 - bm.sparsity() / 100.0
        sparse_fwd = lambda: attnkit.flex_attention(q, k, v, block_mask=bm)
        sparse_bwd, _ = backward_of(lambda *t: attnkit.flex_attention(*t, block_mask=bm), q, k, v, dout)
        for pas, dense, sparse in (("fwd", dense_fwd, sparse_fwd), ("bwd", dense_bwd, sparse_bwd)):
            for timer in ("do_bench", "events"):
                for p in range(args.pairs):
                    t = (lambda f: do_bench(f, warmup=25, rep=200, return_mode="median")) if timer == "do_bench" else events_ms
                    d_ms = t(dense)
                    d_state = gpu_state()
                    s_ms = t(sparse)
                    s_state = gpu_state()
                    frac = density * d_ms / s_ms  # TFLOP/s on visited blocks over dense TFLOP/s, as bench_flex.py
                    rows.append(dict(meta, case=name, pass_=pas, timer=timer, pair=p, density=density, dense_ms=d_ms,
                                     case_ms=s_ms, fraction_of_dense=frac, dense_sm_mhz=d_state[0], dense_power_w=d_state[1],
                                     case_sm_mhz=s_state[0], case_power_w=s_state[1],
                                     dense_tflops=(2.5 if pas == "bwd" else 1) * dense_fl / d_ms / 1e9))
                    print(f"{name:16} {pas:4} {timer:7} {d_ms:9.4f} {s_ms:9.4f} {frac:9.3f}  "
                          f"{d_state[0]:.0f}/{d_state[1]:.0f}  {s_state[0]:.0f}/{s_state[1]:.0f}", flush=True)
                    write_rows(args.out, "flex_fraction_check.jsonl", rows)


if __name__ == "__main__":
    main()
