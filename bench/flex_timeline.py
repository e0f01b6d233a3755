"""bench/flex_timeline.py — the kernels of one attnkit flex forward and backward at bench_flex.py's
shape, on the GPU's own timeline (torch.profiler / CUPTI: concurrent kernels keep their overlap,
unlike ncu's serialised launches): each kernel's start relative to the call's first kernel, its
duration, and the call's span. A 256 MB buffer is zeroed before each call, as triton's do_bench
(bench_flex.py's timer) does.

    python3 bench/flex_timeline.py [--out DIR] [--cases sliding1024,document_causal,causal,noop]

A diagnostic (where a call's time goes), not a benchmark.
"""
import argparse, json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.nn.attention.flex_attention import create_block_mask
from torch.profiler import ProfilerActivity, profile

import attnkit
from bench_flex import D, H, backward_of, mask_mods


def kernel_events(prof):
    """[(name, start us, duration us)] of the GPU kernels and memsets, in start order."""
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out.append((e.name, e.time_range.start, e.time_range.end - e.time_range.start))
    return sorted(out, key=lambda x: x[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--cases", default="sliding1024,document_causal,causal,noop")
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args()
    dev, S, B = "cuda", 16384, 1
    torch.manual_seed(0)
    q, k, v, dout = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(4))
    mods = mask_mods(S, dev)
    cache = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device=dev)
    report = []
    for name in args.cases.split(","):
        mm = mods[name]
        bm = create_block_mask(mm, B, None, S, S, device=dev) if mm is not None else None
        fwd = lambda: attnkit.flex_attention(q, k, v, block_mask=bm)
        bwd, _ = backward_of(lambda *t: attnkit.flex_attention(*t, block_mask=bm), q, k, v, dout)
        for pas, fn in (("fwd", fwd), ("bwd", bwd)):
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    cache.zero_()
                    fn()
                torch.cuda.synchronize()
            ev = kernel_events(prof)
            # Calls are separated by the cache's fill (a long fill kernel before each call).
            groups, cur = [], None
            for e in ev:
                if "fill" in e[0].lower() and e[2] > 30:
                    cur = []
                    groups.append(cur)
                elif cur is not None:
                    cur.append(e)
            if not any(groups):
                print(f"{name} {pas}: no call boundaries found; events:", [(n[:60], round(d, 1)) for n, _, d in ev[:40]])
                continue
            spans = []
            for g in groups:
                if not g:
                    continue
                t0 = g[0][1]
                spans.append(max(s + d for _, s, d in g) - t0)
            last = [g for g in groups if g][-1]
            t0 = last[0][1]
            print(f"\n{name} {pas}: call spans (us) {[round(s, 1) for s in spans]}")
            for n, s, d in last:
                print(f"  {s - t0:9.1f} +{d:8.1f}  {n[:110]}")
            report.append(dict(case=name, pass_=pas, spans_us=spans,
                               kernels=[dict(name=n, start_us=s - t0, dur_us=d) for n, s, d in last]))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "flex_timeline.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
