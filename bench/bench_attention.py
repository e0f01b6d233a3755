"""bench/bench_attention.py — attnkit's softmax attention forward beside torch SDPA (cuDNN and flash
backends) in one process on one GPU. Prints a table of ratios and writes JSON lines.

    python3 bench/bench_attention.py [--lib build-device/tools/libattnkit_c.so] [--out DIR] [--quick]

FLOPs: 4*B*H*Sq*Sk*D, halved when causal (../shared/DESIGN.md). Timing: triton's do_bench
(CUDA events, L2 flushed between runs), median.
"""
import argparse, ctypes, datetime, json, os, subprocess

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench


def load_lib(path):
    lib = ctypes.CDLL(path)
    f = lib.attnkit_c_attention_fwd
    P, I64, I, D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
    f.argtypes = [P, P, P, P, P, I64, I64, I64, I64, I64, I64, I, I, I, I, I64, I64, D, D, P, P, I64, I64, I64, P,
                  ctypes.c_char_p, I]
    f.restype = I
    return f


class Attnkit:
    def __init__(self, fn):
        self.fn = fn
        self.err = ctypes.create_string_buffer(512)

    def fwd(self, q, k, v, out, lse, causal, layout, cu=None, max_len=0):
        """layout 1: q/k/v/out [B, H, S, D]; layout 0 with cu: packed [total, H, D]."""
        stream = torch.cuda.current_stream().cuda_stream
        if cu is None:
            B, Hq, Sq, D = q.shape
            Hkv, Sk = k.shape[1], k.shape[2]
            cu_ptr, n = None, 0
        else:
            B = 1
            Sq, Hq, D = q.shape
            Sk, Hkv = k.shape[0], k.shape[1]
            cu_ptr, n = cu.data_ptr(), cu.numel() - 1
        rc = self.fn(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr() if lse is not None else None,
                     B, Sq, Sk, Hq, Hkv, D, 0 if q.dtype == torch.bfloat16 else 1, layout, int(causal), 0, -1, -1,
                     0.0, 0.0, cu_ptr, cu_ptr, n, max_len, max_len, stream, self.err, 512)
        if rc != 0:
            raise RuntimeError(self.err.value.decode())


def device_meta():
    """What every result row records about the run: GPU, SM count, torch, date, clocks."""
    props = torch.cuda.get_device_properties(0)
    meta = dict(gpu=torch.cuda.get_device_name(), sms=props.multi_processor_count, torch=torch.__version__,
                date=datetime.date.today().isoformat())
    try:
        meta["clocks"] = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem", "--format=csv,noheader"],
                                        capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return meta


VARLEN_LENS = [4096, 3000, 2500, 2048, 1800, 1500, 1000, 436]  # 8 sequences, 16k tokens


def write_rows(out_dir, name, rows):
    """The results as JSON lines, out_dir/name; returns the path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    with open(path, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return path


def flops(B, H, Sq, Sk, D, causal):
    return 4 * B * H * Sq * Sk * D * (0.5 if causal else 1.0)


def time_ms(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def sdpa_ms(backend, q, k, v, causal):
    gqa = q.shape[1] != k.shape[1]
    try:
        with sdpa_kernel([backend]):
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
            fn()
            return time_ms(fn), fn()
    except Exception:  # a backend may refuse a shape
        return float("nan"), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-device/tools/libattnkit_c.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    ak = Attnkit(load_lib(args.lib))
    dev = "cuda"
    meta = device_meta()
    print(json.dumps(meta))
    rows, cases = [], []
    for D in (64, 128, 256):
        H = 2048 // D
        for S in ((2048, 8192) if args.quick else (512, 2048, 8192, 16384)):
            for causal in (False, True):
                cases.append((16384 // S, H, H, S, D, causal))
    cases.append((2, 32, 8, 8192, 128, True))  # GQA 32q/8kv
    print(f"{'case':42s} {'attnkit':>8s} {'cuDNN':>8s} {'flash':>8s} {'vs cuDNN':>9s} {'vs flash':>9s}  max|err| vs cuDNN")
    for (B, Hq, Hkv, S, D, causal) in cases:
        torch.manual_seed(0)
        q = torch.randn(B, Hq, S, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.bfloat16)
        out = torch.empty_like(q)
        lse = torch.empty(B, Hq, S, device=dev, dtype=torch.float32)
        run = lambda: ak.fwd(q, k, v, out, lse, causal, 1)
        run()
        ms = time_ms(run)
        cud_ms, ref = sdpa_ms(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
        fl_ms, ref2 = sdpa_ms(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
        ref = ref if ref is not None else ref2
        err = (out.float() - ref.float()).abs().max().item() if ref is not None else float("nan")
        f = flops(B, Hq, S, S, D, causal)
        row = dict(meta, op="attention_fwd", B=B, Hq=Hq, Hkv=Hkv, S=S, D=D, causal=causal, ms=ms, tflops=f / ms / 1e9,
                   cudnn_ms=cud_ms, cudnn_tflops=f / cud_ms / 1e9, flash_ms=fl_ms, flash_tflops=f / fl_ms / 1e9,
                   ratio_cudnn=cud_ms / ms, ratio_flash=fl_ms / ms, max_err_vs_sdpa=err)
        rows.append(row)
        name = f"B{B} Hq{Hq} Hkv{Hkv} S{S} D{D}{' causal' if causal else ''}"
        print(f"{name:42s} {row['tflops']:8.1f} {row['cudnn_tflops']:8.1f} {row['flash_tflops']:8.1f} "
              f"{row['ratio_cudnn']:8.2f}x {row['ratio_flash']:8.2f}x  {err:.3g}", flush=True)
    # One varlen batch: 8 sequences, 16k tokens, D128, 16 heads, causal. The peer runs the same
    # sequences padded to the longest (SDPA has no varlen); FLOPs count real tokens only.
    lens = VARLEN_LENS
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device=dev, dtype=torch.int32)
    T, H, D = sum(lens), 16, 128
    q = torch.randn(T, H, D, device=dev, dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    out = torch.empty_like(q)
    run = lambda: ak.fwd(q, k, v, out, None, True, 0, cu, max(lens))
    run()
    ms = time_ms(run)
    f = sum(flops(1, H, L, L, D, True) for L in lens)
    qp = torch.randn(len(lens), H, max(lens), D, device=dev, dtype=torch.bfloat16)
    cud_ms, _ = sdpa_ms(SDPBackend.CUDNN_ATTENTION, qp, qp, qp, True)
    fl_ms, _ = sdpa_ms(SDPBackend.FLASH_ATTENTION, qp, qp, qp, True)
    row = dict(meta, op="attention_fwd_varlen", lens=lens, H=H, D=D, causal=True, ms=ms, tflops=f / ms / 1e9,
               cudnn_padded_ms=cud_ms, flash_padded_ms=fl_ms, ratio_cudnn=cud_ms / ms, ratio_flash=fl_ms / ms)
    rows.append(row)
    print(f"{'varlen 8 seqs 16k tok H16 D128 causal':42s} {row['tflops']:8.1f} {f / cud_ms / 1e9:8.1f} {f / fl_ms / 1e9:8.1f} "
          f"{row['ratio_cudnn']:8.2f}x {row['ratio_flash']:8.2f}x  (peers padded)")
    print("wrote", write_rows(args.out, "bench_attention.jsonl", rows))


if __name__ == "__main__":
    main()
