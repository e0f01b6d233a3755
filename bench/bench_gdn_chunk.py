"""bench/bench_gdn_chunk.py — attnkit's chunked gated delta rule forward beside flash-linear-
attention's chunk_gated_delta_rule in one process: the cases of issue 5 and ../shared/PEERS.md
(K = V = 128, bf16 q/k/v/beta, fp32 log-decay g, l2norm inside the op, final state returned).

    python3 bench/bench_gdn_chunk.py [--out DIR] [--quick]

attnkit is the pip-built package (torch.ops.attnkit, scripts/setup_python.sh); FLA comes from the
wheels scripts/device/run.sh installs in /tmp/site. Timing: triton's do_bench median. Reported:
ms, speedup over FLA, the issue's bar, and RMS(attnkit - FLA) / RMS(FLA) of the output and state.
Also each side replayed from a CUDA graph (`graph_ms`, `fla_graph_ms`): GPU time without Python's
launch overhead, which FLA's several kernels a call pay and which moves from machine to machine
(None where a side cannot be captured).
"""
import argparse, os, sys

sys.path.insert(0, os.environ.get("FLA_SRC", "/tmp/site"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn.functional as F
from triton.testing import do_bench

from bench_attention import device_meta, write_rows

D = 128
# name, B, T, H, number of varlen sequences (None: dense), issue 5's bar (x FLA)
CASES = [
    ("B4 T8192 H16", 4, 8192, 16, None, 2.5),
    ("B1 T8192 H16", 1, 8192, 16, None, 2.0),
    ("varlen 20 seqs 8192 tok H64", 1, 8192, 64, 20, 2.0),
    ("B2 T16384 H64", 2, 16384, 64, None, None),
]


def make_inputs(B, T, H, nseq, dev="cuda"):
    torch.manual_seed(0)
    q = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(B, T, H, device=dev, dtype=torch.float32))
    beta = torch.rand(B, T, H, device=dev, dtype=torch.bfloat16).sigmoid()
    cu = None
    if nseq:  # nseq random lengths summing to T
        cuts = torch.randperm(T - 1, generator=torch.Generator().manual_seed(1))[: nseq - 1] + 1
        cu = torch.cat([torch.tensor([0]), cuts.sort().values, torch.tensor([T])]).to(dev, torch.int64)
    return q, k, v, g, beta, cu


def graph_ms(fn):
    """Median ms of fn replayed from a CUDA graph, or None if fn cannot be captured."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture (allocator pools, autotuning)
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return do_bench(graph.replay, warmup=10, rep=200, return_mode="median")
    except Exception as e:  # e.g. a host sync inside fn
        print(f"  (no CUDA graph: {type(e).__name__}: {e})")
        return None


def fla_op(module, name):
    """FLA's function `name` from `module`, or None (with the reason printed) where FLA is missing."""
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except ImportError as e:
        print("FLA not importable:", e)
        return None


def rms_ratio(a, ref):
    return ((a.float() - ref.float()).pow(2).mean().sqrt() / ref.float().pow(2).mean().sqrt()).item()


def main():
    import attnkit  # here, not at the top: the other benches import this module's helpers without the op
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    ap.add_argument("--quick", action="store_true", help="the first two cases only")
    args = ap.parse_args()
    fla_chunk = fla_op("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")
    meta = device_meta()
    rows = []
    print(f"{'case':30s} {'attnkit ms':>10s} {'FLA ms':>8s} {'speedup':>8s} {'bar':>5s}  rel o / state vs FLA")
    for name, B, T, H, nseq, bar in CASES[:2] if args.quick else CASES:
        q, k, v, g, beta, cu = make_inputs(B, T, H, nseq)
        kw = dict(output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
        ours = lambda: attnkit.chunk_gated_delta_rule(q, k, v, g, beta, **kw)
        with torch.no_grad():
            o, s = ours()
            ms = do_bench(ours, warmup=25, rep=200, return_mode="median")
            g_ms = graph_ms(ours)
            fla_ms, rel_o, rel_s, fla_g_ms = float("nan"), float("nan"), float("nan"), None
            if fla_chunk is not None:
                fla = lambda: fla_chunk(q, k, v, g, beta, **kw)
                o_ref, s_ref = fla()
                fla_ms = do_bench(fla, warmup=25, rep=200, return_mode="median")
                fla_g_ms = graph_ms(fla)
                rel_o, rel_s = rms_ratio(o, o_ref), rms_ratio(s, s_ref)
        speedup = fla_ms / ms
        # Under CUDA graphs too: FLA's Python / Triton launches make its do_bench time host-bound
        # and noisy (one run measured it 34% above its own earlier time, its graph time unchanged).
        speedup_graphs = fla_g_ms / g_ms if g_ms and fla_g_ms else None
        rows.append(dict(meta, op="gdn_chunk_fwd", case=name, B=B, T=T, H=H, K=D, V=D, varlen_seqs=nseq, ms=ms,
                         fla_ms=fla_ms, speedup_vs_fla=speedup, bar=bar, rel_rms_o_vs_fla=rel_o,
                         rel_rms_state_vs_fla=rel_s, graph_ms=g_ms, fla_graph_ms=fla_g_ms,
                         speedup_vs_fla_graphs=speedup_graphs))
        graphs = f"graphs {g_ms:.4f} / {fla_g_ms:.4f} ms ({speedup_graphs:.2f}x)" if speedup_graphs else "graphs -"
        print(f"{name:30s} {ms:10.4f} {fla_ms:8.4f} {speedup:7.2f}x {bar or '-':>5}  {rel_o:.2e} / {rel_s:.2e}  {graphs}",
              flush=True)
    print("wrote", write_rows(args.out, "bench_gdn_chunk.jsonl", rows))


if __name__ == "__main__":
    main()
