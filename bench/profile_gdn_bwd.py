"""bench/profile_gdn_bwd.py — where the chunked GDN forward + backward spends its GPU time: one
case (default B4 T8192 H16, K = V = 128, l2norm, initial and final state) under torch.profiler,
per-kernel CUDA time summed over --iters iterations and divided by them.

    python3 bench/profile_gdn_bwd.py [--B 4 --T 8192 --H 16] [--seqs N] [--iters 10] [--keep t|all|none]

--seqs N: a packed (varlen) batch of N sequences of random lengths summing to T (B = 1), as
bench_gdn_chunk_bwd.py's varlen case draws them.

--keep: what the forward keeps for the backward (chunk_gated_delta_rule's keep_intermediates): t
(T, the default), none (the backward reruns the forward whole), all (the backward reruns nothing).
--timeline: also the kernels of the last profiled step in the order they ran, each with its start
(from the step's first kernel), its duration and the idle gap before it.
Also printed: the elapsed time per step and the host's time to issue one (a step whose host time
exceeds its kernels' is host-bound), and the caching allocator's cudaMalloc / cudaFree calls.
"""
import argparse, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.profiler import ProfilerActivity, profile

import attnkit
from bench_gdn_chunk import D, make_inputs


KEEP = {"t": "t", "all": True, "none": False}  # --keep -> keep_intermediates


def make_step(B, T, H, keep, dev="cuda", seqs=None):
    """(forward, step) of the profiled case: the forward alone (autograd recording), and forward +
    backward through torch.autograd.grad (l2norm, initial and final state; also profile_gdn_host.py's).
    seqs: a packed batch of that many sequences (B must be 1)."""
    q, k, v, g, beta, cu = make_inputs(B, T, H, seqs, dev)
    h0 = torch.randn(B if cu is None else cu.numel() - 1, H, D, D, device=dev)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta, h0)]
    do, dht = torch.randn_like(v), torch.randn_like(h0)

    def forward():
        return attnkit.chunk_gated_delta_rule(*leaves[:5], initial_state=leaves[5], output_final_state=True,
                                              use_qk_l2norm_in_kernel=True, keep_intermediates=keep, cu_seqlens=cu)

    def step():
        torch.autograd.grad(forward(), leaves, (do, dht))

    return forward, step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--T", type=int, default=8192)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--keep", choices=("none", "t", "all"), default="t")
    ap.add_argument("--timeline", action="store_true", help="the last step's kernels in order, with the gaps between them")
    ap.add_argument("--seqs", type=int, default=None, help="a packed batch of this many sequences (B = 1)")
    args = ap.parse_args()
    if args.seqs and args.B != 1:
        ap.error(f"--seqs packs one batch entry: --B 1 expected, got {args.B}")
    _, step = make_step(args.B, args.T, args.H, KEEP[args.keep], seqs=args.seqs)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    # Elapsed time per step (events around each, median) beside the kernels' sum below: a gap
    # between the two is host time or idle GPU between the kernels.
    # Also the host's time to issue a step (no wait on the GPU inside it) and the caching
    # allocator's cudaMalloc / cudaFree calls over the loop (each one synchronises the device).
    times, host = [], []
    stats0 = torch.cuda.memory_stats()
    for _ in range(args.iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        step()
        host.append((time.perf_counter() - t0) * 1e3)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    stats1 = torch.cuda.memory_stats()
    elapsed = sorted(times)[len(times) // 2]
    print(f"host time to issue a step: {sorted(host)[len(host) // 2]:.3f} ms (median); cudaMalloc / cudaFree calls over"
          f" {args.iters} steps: {stats1.get('num_device_alloc', 0) - stats0.get('num_device_alloc', 0)} /"
          f" {stats1.get('num_device_free', 0) - stats0.get('num_device_free', 0)}")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.iters):
            step()
        torch.cuda.synchronize()
    totals = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            name = short_name(e)
            totals[name] = totals.get(name, 0.0) + e.device_time / 1000.0
    total = sum(totals.values()) / args.iters
    print(f"B{args.B} T{args.T} H{args.H}{f' varlen {args.seqs} seqs' if args.seqs else ''}{'' if args.keep == 'none' else ' keep ' + args.keep}: {total:.3f} ms of kernels per forward + backward,"
          f" {elapsed:.3f} ms elapsed (median of {args.iters})")
    for name, ms in sorted(totals.items(), key=lambda x: -x[1]):
        print(f"  {ms / args.iters:8.4f} ms  {name}")
    if args.timeline:
        print_timeline(prof, args.iters)


def short_name(event):
    """A kernel's name without template arguments and parameters."""
    return event.name.split("<")[0].split("(")[0][:60]


def print_timeline(prof, iters):
    """The last step's kernels (by start time; every step launches the same number), with start
    times relative to that step's first kernel and the idle time before each."""
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    per_step = len(kernels) // iters
    last = kernels[-per_step:]
    t0, previous_end, idle = last[0].time_range.start, None, 0.0
    print(f"timeline of the last step ({per_step} kernels; us):   start  duration  gap before")
    for e in last:
        gap = 0.0 if previous_end is None else e.time_range.start - previous_end
        idle += max(gap, 0.0)
        print(f"  {e.time_range.start - t0:10.1f} {e.time_range.end - e.time_range.start:9.1f} {gap:9.1f}  {short_name(e)}")
        previous_end = e.time_range.end
    print(f"  idle between the step's kernels: {idle:.1f} us; first kernel start to last kernel end: {previous_end - t0:.1f} us")


if __name__ == "__main__":
    main()
