"""bench/flex_timer_check.py — one flex forward call (bench_flex.py's shape) timed five ways, to
tell the kernel's time from what the timer adds: triton's do_bench (bench_flex.py's timer: a 256 MB
fill before each call, events around the call); the same loop written out, with and without the
fill; triton's do_bench_cudagraph (the call replayed from a CUDA graph: no host work between
calls); and N calls back to back between two events, divided by N.

    python3 bench/flex_timer_check.py [--out DIR]

A diagnostic of the timer, not a benchmark.
"""
import argparse, json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.nn.attention.flex_attention import create_block_mask
from triton.testing import do_bench, do_bench_cudagraph

import attnkit
from bench_flex import D, H, mask_mods


def loop_ms(fn, reps, fill):
    """do_bench's inner loop written out: (fill,) start, fn, end per repetition; the median."""
    cache = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(10):
        fn()
    for i in range(reps):
        if fill:
            cache.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return t[len(t) // 2]


def back_to_back_ms(fn, n=200):
    for _ in range(10):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    dev, S, B = "cuda", 16384, 1
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    mods = mask_mods(S, dev)
    rows = []
    for name in ("noop", "sliding1024", "document_causal"):
        mm = mods[name]
        bm = create_block_mask(mm, B, None, S, S, device=dev) if mm is not None else None
        fn = lambda: attnkit.flex_attention(q, k, v, block_mask=bm)
        r = dict(case=name,
                 do_bench=do_bench(fn, warmup=25, rep=200, return_mode="median"),
                 loop_fill=loop_ms(fn, 300, True), loop_no_fill=loop_ms(fn, 300, False),
                 cudagraph=do_bench_cudagraph(fn, rep=200, return_mode="median"),
                 back_to_back=back_to_back_ms(fn))
        rows.append(r)
        print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "flex_timer_check.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
