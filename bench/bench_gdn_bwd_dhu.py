"""bench/bench_gdn_bwd_dhu.py — attnkit's reverse state-gradient pass (bwd_dhu) beside
flash-linear-attention's chunk_gated_delta_rule_bwd_dhu in one process: issue 6's shapes
(K = V = 128, bf16 rows, fp32 in-chunk cumulative gates, dht given, dh0 returned).

    python3 bench/bench_gdn_bwd_dhu.py [--out DIR] [--fla-only] [--lib build/tools/libattnkit_c.so]
                                      [--cases 0,5] [--segments N]

--fla-only times FLA alone (no attnkit op build needed: FLA's wheels are enough), e.g. to learn
where a device puts the bar. --lib calls attnkit through the C ABI (tools/capi.cpp) instead of the
torch op: a CUDA build's libattnkit_c.so is enough, no op library; with it, --segments sets
GdnBwdDhuParams::num_segments (0 automatic, 1 no split, n). The cases past issue 6's three shapes
have few (sequence, value head) chains: bwd_dhu's own sequence split runs there (no bar).

Both sides get the same tensors; FLA takes base-2 gates and so does attnkit's Python wrapper (it
converts them for the op). Inputs are shaped like the real pass's: unit keys, w = beta * k, so
dh stays finite and the two sides' results can be compared (RMS(attnkit - FLA) / RMS(FLA)).
Timing: triton's do_bench median, and each side replayed from a CUDA graph (GPU time without
Python's launch overhead).
"""
import argparse, ctypes, math, os, sys

sys.path.insert(0, os.environ.get("FLA_SRC", "/tmp/site"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn.functional as F
from triton.testing import do_bench

from bench_attention import device_meta, write_rows
from bench_gdn_chunk import fla_op, graph_ms, rms_ratio

D = 128
# name, B, T, H, gate (None, "g", "gk"), issue 6's bar (x FLA)
CASES = [
    ("B2 T8192 H16 no gate", 2, 8192, 16, None, 1.3),
    ("B2 T8192 H16 g", 2, 8192, 16, "g", 1.3),
    ("B1 T8192 H64 gk", 1, 8192, 64, "gk", 1.3),
    ("B1 T4096 H16 no gate", 1, 4096, 16, None, 1.3),
    ("B1 T4096 H16 g", 1, 4096, 16, "g", 1.3),
    ("B1 T8192 H4 no gate", 1, 8192, 4, None, None),
    ("B1 T8192 H4 g", 1, 8192, 4, "g", None),
    ("B1 T8192 H1 gk", 1, 8192, 1, "gk", None),
]


def make_inputs(B, T, H, gate, dev="cuda"):
    torch.manual_seed(0)
    q = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    k = F.normalize(torch.randn(B, T, H, D, device=dev), dim=-1)
    w = (k * torch.rand(B, T, H, 1, device=dev)).bfloat16()
    k = k.bfloat16()
    do = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    dv = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    dht = torch.randn(B, H, D, D, device=dev)
    g = gk = None
    if gate:  # in-chunk cumulative log-decays, base 2 (FLA's convention)
        shape = (B, T // 64, 64, H) + ((D,) if gate == "gk" else ())
        G = (F.logsigmoid(torch.randn(shape, device=dev)) * 0.1).cumsum(2).reshape(B, T, H, *shape[4:]) / math.log(2.0)
        g, gk = (G, None) if gate == "g" else (None, G)
    return q, k, w, do, dv, g, gk, dht


def c_abi_dhu(path, segments=0):
    """attnkit's bwd_dhu through the C ABI, called like the torch op's wrapper: FLA's base-2 gates,
    which the op takes as they are (gates_log2); `segments`: num_segments."""
    f = ctypes.CDLL(path).attnkit_c_gdn_bwd_dhu
    P, I64, I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    f.argtypes = [P] * 7 + [I] + [P] * 4 + [I64] * 6 + [I, ctypes.c_double, I, P, ctypes.c_char_p, I]
    err = ctypes.create_string_buffer(512)
    ptr = lambda t: None if t is None else t.data_ptr()

    def run(q, k, w, do, dv, g=None, gk=None, h0=None, dht=None, scale=None):
        B, T, H, K = q.shape
        HV, V = do.shape[2], do.shape[3]
        dh = q.new_empty(B, (T + 63) // 64, HV, K, V)
        dh0 = torch.empty(B, HV, K, V, device=q.device) if h0 is not None else None
        dv2 = torch.empty_like(dv)
        rc = f(ptr(q), ptr(k), ptr(w), ptr(do), ptr(dv), ptr(g), ptr(gk), 1, ptr(dht), ptr(dh), ptr(dh0), ptr(dv2),
               B, T, H, HV, K, V, 0 if q.dtype == torch.bfloat16 else 1, scale or -1.0, segments,
               torch.cuda.current_stream().cuda_stream, err, 512)
        if rc:
            raise RuntimeError(err.value.decode())
        return dh, dh0, dv2
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    ap.add_argument("--fla-only", action="store_true", help="time FLA alone")
    ap.add_argument("--lib", help="libattnkit_c.so: attnkit through the C ABI instead of the torch op")
    ap.add_argument("--cases", default=None, help="comma-separated indices into CASES (default: all)")
    ap.add_argument("--segments", type=int, default=0, help="with --lib: num_segments (0 automatic, 1 none)")
    args = ap.parse_args()
    if args.lib:
        attnkit_dhu = c_abi_dhu(args.lib, args.segments)
    elif not args.fla_only:
        import attnkit
        attnkit_dhu = attnkit.chunk_gated_delta_rule_bwd_dhu
    fla_dhu = fla_op("fla.ops.common.chunk_delta_h", "chunk_gated_delta_rule_bwd_dhu")
    meta = device_meta()
    rows = []
    print(f"{'case':24s} {'attnkit ms':>10s} {'FLA ms':>8s} {'speedup':>8s} {'bar':>5s}  rel dh / dh0 / dv2 vs FLA  graphs")
    cases = CASES if args.cases is None else [CASES[int(i)] for i in args.cases.split(",")]
    for name, B, T, H, gate, bar in cases:
        q, k, w, do, dv, g, gk, dht = make_inputs(B, T, H, gate)
        kw = dict(g=g, gk=gk, h0=dht, dht=dht, scale=D ** -0.5)
        ms, g_ms, res = float("nan"), None, None
        if not args.fla_only:
            ours = lambda: attnkit_dhu(q, k, w, do, dv, **kw)
            res = ours()
            ms = do_bench(ours, warmup=25, rep=200, return_mode="median")
            g_ms = graph_ms(ours)
        fla_ms, rel, fla_g_ms = float("nan"), [float("nan")] * 3, None
        if fla_dhu is not None:
            fla = lambda: fla_dhu(q, k, w, do, dv, **kw)
            want = fla()
            fla_ms = do_bench(fla, warmup=25, rep=200, return_mode="median")
            fla_g_ms = graph_ms(fla)
            if res is not None:
                rel = [rms_ratio(a, b) for a, b in zip(res, want)]
        speedup = fla_ms / ms
        graph_speedup = fla_g_ms / g_ms if g_ms and fla_g_ms else None
        rows.append(dict(meta, op="gdn_bwd_dhu", case=name, B=B, T=T, H=H, K=D, V=D, gate=gate, ms=ms, fla_ms=fla_ms,
                         speedup_vs_fla=speedup, bar=bar, segments=args.segments if args.lib else 0, graph_ms=g_ms, fla_graph_ms=fla_g_ms,
                         graph_speedup_vs_fla=graph_speedup, rel_rms_dh_vs_fla=rel[0], rel_rms_dh0_vs_fla=rel[1],
                         rel_rms_dv2_vs_fla=rel[2]))
        graphs = f"{g_ms:.4f} / {fla_g_ms:.4f} ms ({graph_speedup:.2f}x)" if graph_speedup else "-"
        print(f"{name:24s} {ms:10.4f} {fla_ms:8.4f} {speedup:7.2f}x {bar or '-':>5}  "
              f"{rel[0]:.1e} / {rel[1]:.1e} / {rel[2]:.1e}  {graphs}", flush=True)
    print("wrote", write_rows(args.out, "bench_gdn_bwd_dhu.jsonl", rows))


if __name__ == "__main__":
    main()
