"""bench/profile_gdn_host.py — where the host time of one chunked GDN forward + backward goes (the
op is host-bound at small shapes: docs/perf/gdn_chunk_bwd.md). One case under torch.profiler with
CPU activities: self CPU time per step of each op and CUDA runtime call, largest first; then the
host time to issue the forward op alone and a whole step (no waits inside), and the cost of one
cudaGetDriverEntryPointByVersion lookup (CUTLASS does one per TMA descriptor it encodes).

    python3 bench/profile_gdn_host.py [--B 1 --T 8192 --H 4] [--iters 20] [--keep t|all|none] [--top 25]
"""
import argparse, ctypes, ctypes.util, glob, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.profiler import ProfilerActivity, profile

from profile_gdn_bwd import KEEP, make_step


def median(xs):
    return sorted(xs)[len(xs) // 2]


def host_ms(fn, iters):
    """Median host time of fn() (no synchronisation inside), the GPU drained between calls."""
    out = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return median(out)


def entry_point_us(n=2000):
    """One cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled") lookup, in microseconds."""
    libs = glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcudart.so*"))
    try:
        import nvidia
        for p in nvidia.__path__:
            libs += glob.glob(os.path.join(p, "*", "lib", "libcudart.so*"))
    except ImportError:
        pass
    for path in libs + [ctypes.util.find_library("cudart") or ""]:
        try:
            rt = ctypes.CDLL(path)
            f = rt.cudaGetDriverEntryPointByVersion
            break
        except (OSError, AttributeError):
            continue
    else:
        return float("nan"), "no libcudart with cudaGetDriverEntryPointByVersion"
    pfn, status = ctypes.c_void_p(), ctypes.c_int()
    rc = f(b"cuTensorMapEncodeTiled", ctypes.byref(pfn), 12000, 0, ctypes.byref(status))
    t0 = time.perf_counter()
    for _ in range(n):
        f(b"cuTensorMapEncodeTiled", ctypes.byref(pfn), 12000, 0, ctypes.byref(status))
    t1 = time.perf_counter()
    # the ctypes call's own cost, from a trivial runtime call
    dev = ctypes.c_int()
    for _ in range(n):
        rt.cudaGetDevice(ctypes.byref(dev))
    t2 = time.perf_counter()
    return ((t1 - t0) - (t2 - t1)) / n * 1e6, f"rc {rc}, status {status.value}, lib {path}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--T", type=int, default=8192)
    ap.add_argument("--H", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--keep", choices=("none", "t", "all"), default="t")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    forward, step = make_step(args.B, args.T, args.H, KEEP[args.keep])

    def forward_nograd():
        with torch.no_grad():
            forward()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    name = f"B{args.B} T{args.T} H{args.H}{'' if args.keep == 'none' else ' keep ' + args.keep}"
    print(f"{name}: host ms to issue (median of {args.iters}, GPU idle at the start): forward + backward "
          f"{host_ms(step, args.iters):.3f}, forward with autograd {host_ms(forward, args.iters):.3f}, "
          f"forward under no_grad {host_ms(forward_nograd, args.iters):.3f}")
    us, how = entry_point_us()
    print(f"cudaGetDriverEntryPointByVersion: {us:.2f} us a lookup ({how})")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.iters):
            step()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.key_averages():
        if e.self_cpu_time_total > 0:
            rows[e.key] = (e.self_cpu_time_total / args.iters / 1e3, e.count / args.iters)
    print(f"self CPU ms per step (calls per step), largest first; sum {sum(r[0] for r in rows.values()):.3f} ms:")
    for key, (ms, calls) in sorted(rows.items(), key=lambda x: -x[1][0])[:args.top]:
        print(f"  {ms:8.4f} ms  {calls:6.1f}  {key[:90]}")


if __name__ == "__main__":
    main()
