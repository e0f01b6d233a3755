"""bench/bench_attention_bwd.py — attnkit's softmax attention backward beside torch SDPA's cuDNN and
flash backward in one process on one GPU. Prints a table of ratios and writes JSON lines.

    python3 bench/bench_attention_bwd.py [--lib build-device/tools/libattnkit_c.so] [--out DIR] [--quick]
                                         [--lengths 512,2048] [--dims 64,128]

--lengths / --dims keep the dense cases of those sequence lengths / head dims (and the GQA and varlen
rows only where they match), for a shorter call.

FLOPs: 2.5 x the forward's 4*B*H*Sq*Sk*D, halved when causal (../shared/DESIGN.md). Timing: triton's
do_bench (CUDA events, L2 flushed between runs), median. attnkit is timed on its backward call alone
(out and LSE from its forward); the peers on torch.autograd.grad of a retained SDPA graph, which runs
only their backward kernels. The deterministic column is attnkit with deterministic=True, timed
in A-B-B-A order with the default so that neither mode always runs second.
"""
import argparse, ctypes, json, os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_attention import VARLEN_LENS, Attnkit, device_meta, flops, load_lib, time_ms, write_rows


def load_bwd(path):
    f = ctypes.CDLL(path).attnkit_c_attention_bwd
    P, I64, I, D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
    f.argtypes = [P] * 9 + [I64] * 6 + [I, I, I, I, I64, I64, D, D, P, P, I64, I64, I64, I, I, P, ctypes.c_char_p, I]
    f.restype = I
    return f


def sdpa_bwd_ms(backend, q, k, v, causal, dout):
    gqa = q.shape[1] != k.shape[1]
    try:
        with sdpa_kernel([backend]):
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, enable_gqa=gqa)
            fn = lambda: torch.autograd.grad(out, (qq, kk, vv), dout, retain_graph=True)
            grads = fn()
            return time_ms(fn), grads
    except Exception:  # a backend may refuse a shape
        return float("nan"), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-device/tools/libattnkit_c.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--lengths", default=None, help="comma-separated sequence lengths to keep (default: all)")
    ap.add_argument("--dims", default=None, help="comma-separated head dims to keep (default: all)")
    args = ap.parse_args()
    lengths = {int(x) for x in args.lengths.split(",")} if args.lengths else None
    dims = {int(x) for x in args.dims.split(",")} if args.dims else None
    keep = lambda S, D: (lengths is None or S in lengths) and (dims is None or D in dims)
    ak = Attnkit(load_lib(args.lib))
    bwd = load_bwd(args.lib)
    errbuf = ctypes.create_string_buffer(512)
    dev = "cuda"
    meta = device_meta()
    print(json.dumps(meta))

    def ak_bwd(q, k, v, out, lse, dout, dq, dk, dv, causal, layout, cu=None, max_len=0, det=False, split=False):
        stream = torch.cuda.current_stream().cuda_stream
        if cu is None:
            B, Hq, Sq, D = q.shape
            Hkv, Sk = k.shape[1], k.shape[2]
            cu_ptr, n = None, 0
        else:
            B, (Sq, Hq, D), (Sk, Hkv) = 1, q.shape, k.shape[:2]
            cu_ptr, n = cu.data_ptr(), cu.numel() - 1
        rc = bwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), dout.data_ptr(), dq.data_ptr(),
                 dk.data_ptr(), dv.data_ptr(), B, Sq, Sk, Hq, Hkv, D, 0, layout, int(causal), 0, -1, -1, 0.0, 0.0, cu_ptr, cu_ptr,
                 n, max_len, max_len, int(split), int(det), stream, errbuf, 512)
        if rc != 0:
            raise RuntimeError(errbuf.value.decode())

    rows = []
    cases = []
    for D in (64, 128, 256):
        H = 2048 // D
        for S in ((2048, 8192) if args.quick else (512, 2048, 8192, 16384)):
            for causal in (False, True):
                cases.append((16384 // S, H, H, S, D, causal))
    cases.append((2, 32, 8, 8192, 128, True))  # GQA 32q/8kv
    cases += [(8, 32, 8, 2048, 128, False), (8, 32, 8, 2048, 128, True)]  # GQA at 2k: the heads packed in the CTA
    cases = [c for c in cases if keep(c[3], c[4])]
    print(f"{'case':38s} {'attnkit':>8s} {'determ.':>8s} {'cuDNN':>8s} {'flash':>8s} {'vs cuDNN':>9s} {'vs flash':>9s} "
          f"{'det cost':>8s}  max|dq err| vs cuDNN")
    for (B, Hq, Hkv, S, D, causal) in cases:
        torch.manual_seed(0)
        q = torch.randn(B, Hq, S, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.bfloat16)
        dout = torch.randn_like(q)
        out = torch.empty_like(q)
        lse = torch.empty(B, Hq, S, device=dev, dtype=torch.float32)
        ak.fwd(q, k, v, out, lse, causal, 1)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        run = lambda det: ak_bwd(q, k, v, out, lse, dout, dq, dk, dv, causal, 1, det=det)
        run(True)
        run(False)
        # A, B, B, A: the H100 slows under sustained load, so whichever mode ran second read slower
        # (docs/perf/attention_bwd.md, twentieth session); each mode is the mean of its two medians.
        ms_1, det_1, det_2, ms_2 = (time_ms(lambda d=d: run(d)) for d in (False, True, True, False))
        ms, det_ms = (ms_1 + ms_2) / 2, (det_1 + det_2) / 2
        cud_ms, ref = sdpa_bwd_ms(SDPBackend.CUDNN_ATTENTION, q, k, v, causal, dout)
        fl_ms, ref2 = sdpa_bwd_ms(SDPBackend.FLASH_ATTENTION, q, k, v, causal, dout)
        ref = ref if ref is not None else ref2
        err = (dq.float() - ref[0].float()).abs().max().item() if ref is not None else float("nan")
        f = 2.5 * flops(B, Hq, S, S, D, causal)
        row = dict(meta, op="attention_bwd", B=B, Hq=Hq, Hkv=Hkv, S=S, D=D, causal=causal, ms=ms, tflops=f / ms / 1e9,
                   deterministic_ms=det_ms, cudnn_ms=cud_ms, cudnn_tflops=f / cud_ms / 1e9, flash_ms=fl_ms,
                   flash_tflops=f / fl_ms / 1e9, ratio_cudnn=cud_ms / ms, ratio_flash=fl_ms / ms,
                   deterministic_cost=det_ms / ms - 1, max_dq_err_vs_sdpa=err)
        rows.append(row)
        write_rows(args.out, "bench_attention_bwd.jsonl", rows)  # after every case: a call cut short keeps them
        name = f"B{B} Hq{Hq} Hkv{Hkv} S{S} D{D}{' causal' if causal else ''}"
        print(f"{name:38s} {row['tflops']:8.1f} {f / det_ms / 1e9:8.1f} {row['cudnn_tflops']:8.1f} {row['flash_tflops']:8.1f} "
              f"{row['ratio_cudnn']:8.2f}x {row['ratio_flash']:8.2f}x {100 * row['deterministic_cost']:7.0f}%  {err:.3g}", flush=True)
    # One varlen batch (as the forward benchmark): the peers run it padded to the longest sequence.
    if not keep(max(VARLEN_LENS), 128):
        print("wrote", write_rows(args.out, "bench_attention_bwd.jsonl", rows))
        return
    lens = VARLEN_LENS
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device=dev, dtype=torch.int32)
    T, H, D = sum(lens), 16, 128
    q = torch.randn(T, H, D, device=dev, dtype=torch.bfloat16)
    k, v, dout = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
    out = torch.empty_like(q)
    lse = torch.empty(H, T, device=dev, dtype=torch.float32)
    ak.fwd(q, k, v, out, lse, True, 0, cu, max(lens))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    run = lambda: ak_bwd(q, k, v, out, lse, dout, dq, dk, dv, True, 0, cu, max(lens))
    run()
    ms = time_ms(run)
    f = 2.5 * sum(flops(1, H, L, L, D, True) for L in lens)
    qp = torch.randn(len(lens), H, max(lens), D, device=dev, dtype=torch.bfloat16)
    cud_ms, _ = sdpa_bwd_ms(SDPBackend.CUDNN_ATTENTION, qp, qp, qp, True, torch.randn_like(qp))
    fl_ms, _ = sdpa_bwd_ms(SDPBackend.FLASH_ATTENTION, qp, qp, qp, True, torch.randn_like(qp))
    row = dict(meta, op="attention_bwd_varlen", lens=lens, H=H, D=D, causal=True, ms=ms, tflops=f / ms / 1e9,
               cudnn_padded_ms=cud_ms, flash_padded_ms=fl_ms, ratio_cudnn=cud_ms / ms, ratio_flash=fl_ms / ms)
    rows.append(row)
    print(f"{'varlen 8 seqs 16k tok H16 D128 causal':38s} {row['tflops']:8.1f} {'':>8s} {f / cud_ms / 1e9:8.1f} "
          f"{f / fl_ms / 1e9:8.1f} {row['ratio_cudnn']:8.2f}x {row['ratio_flash']:8.2f}x  (peers padded)")
    print("wrote", write_rows(args.out, "bench_attention_bwd.jsonl", rows))


if __name__ == "__main__":
    main()
