"""bench/bench_gdn_chunk_bwd.py — forward + backward of attnkit's chunked gated delta rule beside
flash-linear-attention's in one process: the cases of issue 6 and ../shared/PEERS.md (K = V = 128,
bf16 q/k/v/beta, fp32 log-decay g, l2norm inside the op, initial and final state; the loss's
cotangents do and dht random).

    python3 bench/bench_gdn_chunk_bwd.py [--out DIR] [--quick | --cases 0,2]

The JSON lines are rewritten after every case, so a call cut short keeps the cases it finished.

FLA's backward refuses Triton 3.6 on Hopper (its issue #640, a miscompile giving wrong gradients):
for timing only the guard is bypassed (../shared/PEERS.md), so FLA's gradients are no reference;
the `rel_*_vs_fla` columns are printed for information. Correctness is the GPU tests' job
(tests/cpp/gdn_chunk_bwd_gpu_test.cpp, against the CPU backend in float64).
Timing: triton's do_bench median of forward + backward (`ms`), and of the forward alone
(`fwd_ms`), so backward ~ ms - fwd_ms. `ms` is attnkit's default (keep_intermediates="auto": at
the two bar cases' 128+ chains "t", the forward keeping T, `t_mb` MB, as FLA's keeps its A, and the
backward rerunning the state pass with w and u from T; at cases 2 and 3's 64 / 32 chains nothing).
`none_ms`: keep_intermediates=False (nothing kept: the backward reruns the forward's
kernels whole). `kept_ms`: keep_intermediates=True (the forward keeps `kept_mb` MB; the backward
reruns nothing).
"""
import argparse, os, sys

sys.path.insert(0, os.environ.get("FLA_SRC", "/tmp/site"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from triton.testing import do_bench

import attnkit
from bench_attention import device_meta, write_rows
from bench_gdn_chunk import D, fla_op, make_inputs, rms_ratio

# name, B, T, H, varlen sequences (None: dense), issue 6's bar (x FLA, forward + backward)
CASES = [
    ("B4 T8192 H16", 4, 8192, 16, None, 2.0),
    ("varlen 20 seqs 8192 tok H64", 1, 8192, 64, 20, 2.0),
    ("B1 T32768 H32", 1, 32768, 32, None, None),
    ("B1 T8192 H16", 1, 8192, 16, None, None),  # 32 recurrence chains: the forward's sequence split, rerun too
]


def fwd_bwd(fn, leaves, kw, do, dht):
    """One forward + backward of fn; returns the gradients of leaves."""
    o, s = fn(*leaves[:5], initial_state=leaves[5], **kw)
    return torch.autograd.grad((o, s), leaves, (do, dht))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    ap.add_argument("--quick", action="store_true", help="the first case only")
    ap.add_argument("--cases", default=None, help="comma-separated indices into CASES (default: all)")
    args = ap.parse_args()
    chosen = CASES[:1] if args.quick else CASES
    if args.cases:
        idx = [int(i) for i in args.cases.split(",")]
        if any(not 0 <= i < len(CASES) for i in idx):
            ap.error(f"--cases: indices in 0..{len(CASES) - 1} expected, got {args.cases}")
        chosen = [CASES[i] for i in idx]
    fla_chunk = fla_op("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")
    if fla_chunk is not None:
        import fla.ops.common.chunk_o as fla_chunk_o
        fla_chunk_o.TRITON_ABOVE_3_7_1 = True  # timing only: see the module docstring
    meta = device_meta()
    rows = []
    print(f"{'case':30s} {'fwd+bwd ms':>10s} {'FLA ms':>8s} {'speedup':>8s} {'bar':>5s} {'fwd ms':>7s} {'FLA fwd':>8s}"
          f" {'none ms':>8s} {'kept ms':>8s} {'speedup':>8s}  rel dq / dk / dv / dg vs FLA (info)")
    for name, B, T, H, nseq, bar in chosen:
        q, k, v, g, beta, cu = make_inputs(B, T, H, nseq)
        N = B if cu is None else cu.numel() - 1
        h0 = torch.randn(N, H, D, D, device="cuda")
        leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta, h0)]
        kw = dict(output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)  # FLA's too: no keep
        do, dht = torch.randn_like(v), torch.randn_like(h0)
        ours = lambda: fwd_bwd(attnkit.chunk_gated_delta_rule, leaves, kw, do, dht)  # the default ("auto")
        ours_fwd = lambda: attnkit.chunk_gated_delta_rule(*leaves[:5], initial_state=leaves[5], **kw)
        default_grads = ours()
        ms = do_bench(ours, warmup=10, rep=200, return_mode="median")
        with torch.no_grad():
            fwd_ms = do_bench(ours_fwd, warmup=10, rep=200, return_mode="median")
        kw_t, kw_none, kw_kept = (dict(kw, keep_intermediates=x) for x in ("t", False, True))
        ours_none = lambda: fwd_bwd(attnkit.chunk_gated_delta_rule, leaves, kw_none, do, dht)
        grads = ours_none()  # the rerun's: the reference the kept variants are compared with
        none_ms = do_bench(ours_none, warmup=10, rep=200, return_mode="median")
        t_grads = fwd_bwd(attnkit.chunk_gated_delta_rule, leaves, kw_t, do, dht)
        t_rel = max(rms_ratio(a, b) for a, b in zip(t_grads, grads))  # T's 16-bit rounding
        ours_kept = lambda: fwd_bwd(attnkit.chunk_gated_delta_rule, leaves, kw_kept, do, dht)
        kept_grads = ours_kept()
        kept_same = all(torch.equal(a, b) for a, b in zip(grads, kept_grads))  # l2norm on: close, not equal
        kept_rel = max(rms_ratio(a, b) for a, b in zip(kept_grads, grads))
        kept_ms = do_bench(ours_kept, warmup=10, rep=200, return_mode="median")

        def kept_bytes(kw_keep):  # what a training forward holds beyond its outputs, MB
            mem0 = torch.cuda.memory_allocated()
            o, s = attnkit.chunk_gated_delta_rule(*leaves[:5], initial_state=leaves[5], **kw_keep)
            return (torch.cuda.memory_allocated() - mem0 - o.nbytes - s.nbytes) / 1e6

        kept_mb, t_mb = kept_bytes(kw_kept), kept_bytes(kw_t)
        fla_ms = fla_fwd_ms = float("nan")
        rel = [float("nan")] * 4
        if fla_chunk is not None:
            fla = lambda: fwd_bwd(fla_chunk, leaves, kw, do, dht)  # kw: no keep_intermediates
            fla_grads = fla()
            fla_ms = do_bench(fla, warmup=10, rep=200, return_mode="median")
            with torch.no_grad():
                fla_fwd_ms = do_bench(lambda: fla_chunk(*leaves[:5], initial_state=leaves[5], **kw), warmup=10, rep=200,
                                      return_mode="median")
            rel = [rms_ratio(default_grads[i], fla_grads[i]) for i in (0, 1, 2, 3)]
        speedup = fla_ms / ms
        rows.append(dict(meta, op="gdn_chunk_fwd_bwd", case=name, B=B, T=T, H=H, K=D, V=D, varlen_seqs=nseq, ms=ms,
                         fwd_ms=fwd_ms, fla_ms=fla_ms, fla_fwd_ms=fla_fwd_ms, speedup_vs_fla=speedup, bar=bar,
                         bwd_ms=ms - fwd_ms, fla_bwd_ms=fla_ms - fla_fwd_ms, rel_dq_vs_fla=rel[0], rel_dk_vs_fla=rel[1],
                         rel_dv_vs_fla=rel[2], rel_dg_vs_fla=rel[3], kept_ms=kept_ms, kept_speedup_vs_fla=fla_ms / kept_ms,
                         kept_mb=kept_mb, kept_bitwise_same=kept_same, kept_max_rel_vs_rerun=kept_rel,
                         t_mb=t_mb, t_max_rel_vs_rerun=t_rel, none_ms=none_ms, none_speedup_vs_fla=fla_ms / none_ms))
        print(f"{name:30s} {ms:10.4f} {fla_ms:8.4f} {speedup:7.2f}x {bar or '-':>5} {fwd_ms:7.4f} {fla_fwd_ms:8.4f} "
              f"{none_ms:8.4f} {kept_ms:8.4f} {fla_ms / kept_ms:7.2f}x  " + " / ".join(f"{r:.1e}" for r in rel)
              + f"  (T {t_mb:.0f} MB, max rel vs rerun {t_rel:.1e}; kept {kept_mb:.0f} MB, {kept_rel:.1e})", flush=True)
        path = write_rows(args.out, "bench_gdn_chunk_bwd.jsonl", rows)
        del leaves, grads
        torch.cuda.empty_cache()
    print("wrote", path)


if __name__ == "__main__":
    main()
