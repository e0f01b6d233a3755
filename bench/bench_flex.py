"""bench/bench_flex.py — attnkit's flex attention forward and backward beside torch.compile(flex_attention) in
one process: ../shared/PEERS.md's flex table (D = 128, 16 heads, B*S = 16384, bf16) with the
same mod objects on both sides (attnkit.flex's catalog mods are torch mods too), and the dense
softmax attention of attnkit at the same shape for the block-sparse efficiency bar; then short
queries against long KV (the split-KV path) beside torch flex's decoding kernel.

    python3 bench/bench_flex.py [--out DIR] [--quick] [--no-backward]

attnkit is the pip-built package (scripts/setup_python.sh). Timing: triton's do_bench median.
TFLOP/s count only visited blocks, as PEERS.md: 4*B*H*S^2*D * (1 - BlockMask sparsity) forward,
2.5 times that backward (its five products against the forward's two). Also
reported: attnkit's dense (no mask) TFLOP/s, and each sparse case's fraction of it. The
backward is timed through autograd (torch.autograd.grad of one forward's output, retained), also
with deterministic=True (attnkit only: its cost over the default mode).
Accuracy: max |attnkit - torch flex| (both bf16; backward: over dq, dk, dv).
"""
import argparse, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch._dynamo
from torch.nn.attention.flex_attention import create_block_mask
from torch.nn.attention.flex_attention import flex_attention as torch_flex
from triton.testing import do_bench

import attnkit
from attnkit import flex
from bench_attention import device_meta, write_rows

D, H = 128, 16


def torch_softcap30(score, b, h, q_idx, kv_idx):
    """torch's side of softcap(30): inductor cannot load the catalog object's captured CPU scalar."""
    return 30.0 * torch.tanh(score / 30.0)


def time_both(name, ours, theirs, results=None):
    """(attnkit ms, torch flex ms, max |difference|), do_bench medians; torch's as NaN (and why,
    printed) when it cannot run the case, so attnkit's number is kept. results: the pair of
    callables whose tensors are compared (default: ours and theirs)."""
    ms = do_bench(ours, warmup=25, rep=200, return_mode="median")
    try:
        ours_out, theirs_out = results or (ours, theirs)
        err = (ours_out().float() - theirs_out().float()).abs().max().item()
        peer_ms = do_bench(theirs, warmup=25, rep=200, return_mode="median")
    except Exception as e:
        print(f"{name}: torch flex failed: {str(e)[:300]}")
        err, peer_ms = float("nan"), float("nan")
    return ms, peer_ms, err


def backward_of(fn, q, k, v, dout):
    """(run the backward of fn(q, k, v) once more, the gradients as one tensor): the forward runs
    once, outside the timing."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)

    def run():
        return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    return run, lambda: torch.cat([g.flatten() for g in run()])


def cases(S, dev):
    torch.manual_seed(0)
    docs = torch.randint(0, 8, (1, S), device=dev, dtype=torch.int32).sort(dim=1).values
    slopes = (torch.arange(H, device=dev, dtype=torch.float32) + 1) * 0.01
    # name, score mod, torch's score mod, mask mod, PEERS.md's torch flex fwd and bwd TFLOP/s (H200, S = 16384)
    return [
        ("noop", None, None, None, 485, 411),
        ("causal", None, None, flex.causal(), 411, 392),
        ("sliding1024", None, None, flex.and_masks(flex.causal(), flex.sliding_window(1024)), 345, 335),
        ("document_causal", None, None, flex.and_masks(flex.causal(), flex.document_mask(docs)), 322, 327),
        ("alibi_causal", flex.alibi(slopes), flex.alibi(slopes), flex.causal(), 376, 385),
        ("softcap_causal", flex.softcap(30.0), torch_softcap30, flex.causal(), 192, 198),
    ]


def mask_mods(S, dev):
    """{case name: mask mod} of cases(S, dev): the diagnostics beside this bench (flex_timeline.py,
    flex_fraction_check.py, flex_timer_check.py) time the bench's own BlockMasks."""
    return {c[0]: c[3] for c in cases(S, dev)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="S = 2048 only")
    ap.add_argument("--no-backward", action="store_true", help="forward rows only")
    args = ap.parse_args()
    dev = "cuda"
    torch._dynamo.config.cache_size_limit = 256
    meta = device_meta()
    rows = []
    print(f"{'case':18} {'S':>6} {'density':>8} {'attnkit':>9} {'torch':>9} {'speedup':>8} {'of dense':>9} "
          f"{'max diff':>9}")
    for S in ((2048,) if args.quick else (16384,)):
        B = max(1, 16384 // S)
        q, k, v, dout = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(4))
        dense_ms = dense_bwd_ms = None
        for name, sm, torch_sm, mm, peer, peer_bwd in cases(S, dev):
            torch._dynamo.reset()
            compiled = torch.compile(torch_flex, dynamic=False, fullgraph=True)
            bm = create_block_mask(mm, B, None, S, S, device=dev) if mm is not None else None
            density = 1.0 if bm is None else 1.0 - bm.sparsity() / 100.0
            fl = 4 * B * H * S * S * D * density

            def ours():
                return attnkit.flex_attention(q, k, v, score_mod=sm, block_mask=bm)

            def theirs():
                return compiled(q, k, v, score_mod=torch_sm, block_mask=bm)

            ms, peer_ms, err = time_both(name, ours, theirs)
            if name == "noop":
                dense_ms = ms
            tf, peer_tf = fl / ms / 1e9, fl / peer_ms / 1e9
            dense_tf = 4 * B * H * S * S * D / dense_ms / 1e9
            # A score mod's own per-score cost is not the block sparsity's: beside the noop's fraction,
            # the fraction of attnkit's dense run with the same score mod (no BlockMask; attnkit only).
            mod_dense_ms = None if sm is None else do_bench(lambda: attnkit.flex_attention(q, k, v, score_mod=sm),
                                                            warmup=25, rep=200, return_mode="median")
            mod_frac = None if sm is None else tf / (4 * B * H * S * S * D / mod_dense_ms / 1e9)
            row = dict(meta, op="flex_fwd", case=name, B=B, H=H, S=S, D=D, density=density, ms=ms, torch_ms=peer_ms,
                       tflops=tf, torch_tflops=peer_tf, speedup_vs_torch=peer_ms / ms, bar=1.3,
                       fraction_of_dense=tf / dense_tf, peers_md_torch_tflops=peer, max_diff_vs_torch=err,
                       same_mod_dense_ms=mod_dense_ms, fraction_of_same_mod_dense=mod_frac)
            rows.append(row)
            write_rows(args.out, "bench_flex.jsonl", rows)  # after every row: a call cut short keeps what it finished
            print(f"{name:18} {S:6d} {density:8.3f} {tf:8.1f}T {peer_tf:8.1f}T {peer_ms / ms:7.2f}x {tf / dense_tf:8.2f} "
                  f"{err:9.2e}" + ("" if mod_frac is None else f"  of same-mod dense {mod_frac:.2f}"), flush=True)
            if args.no_backward:
                continue
            ours_bwd, ours_grads = backward_of(lambda *t: attnkit.flex_attention(*t, score_mod=sm, block_mask=bm), q, k, v,
                                               dout)
            theirs_bwd, theirs_grads = backward_of(lambda *t: compiled(*t, score_mod=torch_sm, block_mask=bm), q, k, v,
                                                   dout)
            ms, peer_ms, err = time_both(name + " bwd", ours_bwd, theirs_bwd, (ours_grads, theirs_grads))
            det_bwd, _ = backward_of(
                lambda *t: attnkit.flex_attention(*t, score_mod=sm, block_mask=bm, deterministic=True), q, k, v, dout)
            det_ms = do_bench(det_bwd, warmup=25, rep=200, return_mode="median")
            if name == "noop":
                dense_bwd_ms = ms
            tf, peer_tf = 2.5 * fl / ms / 1e9, 2.5 * fl / peer_ms / 1e9
            dense_tf = 2.5 * 4 * B * H * S * S * D / dense_bwd_ms / 1e9
            mod_dense_ms = mod_frac = None
            if sm is not None:
                mod_bwd, _ = backward_of(lambda *t: attnkit.flex_attention(*t, score_mod=sm), q, k, v, dout)
                mod_dense_ms = do_bench(mod_bwd, warmup=25, rep=200, return_mode="median")
                mod_frac = tf / (2.5 * 4 * B * H * S * S * D / mod_dense_ms / 1e9)
            rows.append(dict(meta, op="flex_bwd", case=name, B=B, H=H, S=S, D=D, density=density, ms=ms, torch_ms=peer_ms,
                             tflops=tf, torch_tflops=peer_tf, speedup_vs_torch=peer_ms / ms, bar=1.3,
                             fraction_of_dense=tf / dense_tf, peers_md_torch_tflops=peer_bwd, max_diff_vs_torch=err,
                             deterministic_ms=det_ms, deterministic_cost=det_ms / ms - 1,
                             same_mod_dense_ms=mod_dense_ms, fraction_of_same_mod_dense=mod_frac))
            write_rows(args.out, "bench_flex.jsonl", rows)
            print(f"{name + ' bwd':18} {S:6d} {density:8.3f} {tf:8.1f}T {peer_tf:8.1f}T {peer_ms / ms:7.2f}x "
                  f"{tf / dense_tf:8.2f} {err:9.2e}  deterministic +{100 * (det_ms / ms - 1):.0f}%"
                  + ("" if mod_frac is None else f", of same-mod dense {mod_frac:.2f}"), flush=True)
    rows += decode_rows(meta, dev, args.quick)
    print("wrote", write_rows(args.out, "bench_flex.jsonl", rows))


def decode_rows(meta, dev, quick):
    """Short queries against long KV (attnkit's split-KV path; torch flex picks its decoding kernel):
    memory-bound, so reported as GB/s of K and V read once (the floor: the device's copy bandwidth)."""
    rows = []
    print(f"\n{'decode case':34} {'attnkit':>9} {'torch':>9} {'speedup':>8} {'KV GB/s':>8} {'max diff':>9}")
    slopes = (torch.arange(32, device=dev, dtype=torch.float32) + 1) * 0.01
    for B, Hq, Hkv, Sq, Sk in ((4, 16, 16, 1, 32768), (4, 16, 16, 16, 32768), (8, 32, 8, 1, 16384)):
        if quick:
            Sk = 4096
        q = torch.randn(B, Hq, Sq, D, device=dev, dtype=torch.bfloat16)
        k, v = (torch.randn(B, Hkv, Sk, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
        gqa = Hq != Hkv
        for name, sm in (("noop", None), ("alibi", flex.alibi(slopes[:Hq]))):
            torch._dynamo.reset()
            compiled = torch.compile(torch_flex, dynamic=False, fullgraph=True)

            def ours():
                return attnkit.flex_attention(q, k, v, score_mod=sm, enable_gqa=gqa)

            def theirs():
                return compiled(q, k, v, score_mod=sm, enable_gqa=gqa)

            ms, peer_ms, err = time_both(name, ours, theirs)
            kv_bytes = 2 * B * Hkv * Sk * D * 2
            case = f"B{B} Hq{Hq} Hkv{Hkv} Sq{Sq} Sk{Sk} {name}"
            rows.append(dict(meta, op="flex_fwd_decode", case=case, B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=D, ms=ms,
                             torch_ms=peer_ms, speedup_vs_torch=peer_ms / ms, kv_gbps=kv_bytes / ms / 1e6,
                             max_diff_vs_torch=err))
            print(f"{case:34} {ms * 1e3:7.1f}us {peer_ms * 1e3:7.1f}us {peer_ms / ms:7.2f}x {kv_bytes / ms / 1e6:8.0f} "
                  f"{err:9.2e}", flush=True)
    return rows


if __name__ == "__main__":
    main()
