"""bench/bench_torch_ops.py — what the PyTorch op path costs over the raw C ABI, beside SDPA cuDNN.

The torch ops (attnkit.flash_attn_func) allocate their outputs and workspace from torch's caching
allocator and go through the dispatcher; the C ABI (libattnkit_c.so, bench_attention.py) writes
into preallocated tensors. Short sequences show the per-call overhead. Needs the attnkit package
installed (scripts/setup_python.sh) and the C ABI built (scripts/setup.sh).
usage: python3 bench/bench_torch_ops.py [--lib build-device/tools/libattnkit_c.so] [--out DIR]"""
import argparse
import json
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attnkit
from bench_attention import Attnkit, device_meta, flops, load_lib, time_ms, write_rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-device/tools/libattnkit_c.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = ap.parse_args()
    capi = Attnkit(load_lib(args.lib))
    meta = device_meta()
    print(json.dumps(meta))
    print(f"{'case':28s} {'C ABI ms':>9s} {'op ms':>9s} {'op fwd+bwd':>11s} {'cuDNN ms':>9s} {'op / C ABI':>10s}")
    rows = []
    for S, causal in ((512, False), (512, True), (2048, True), (8192, True)):
        B, H, D = 16384 // S, 16, 128
        # [B, H, S, D] memory for both paths: the C ABI's layout 1, the op's [B, S, H, D] views of it
        qh, kh, vh = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out = torch.empty_like(qh)
        lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        capi_ms = time_ms(lambda: capi.fwd(qh, kh, vh, out, lse, causal, 1))
        q, k, v = (t.transpose(1, 2) for t in (qh, kh, vh))
        op_ms = time_ms(lambda: attnkit.flash_attn_func(q, k, v, causal=causal))
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        dout = torch.randn_like(q)

        def fwd_bwd():
            o = attnkit.flash_attn_func(qg, kg, vg, causal=causal)
            torch.autograd.grad(o, (qg, kg, vg), dout)

        train_ms = time_ms(fwd_bwd)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            cudnn_ms = time_ms(lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal))
        row = dict(meta, op="attention_fwd_torch_op", B=B, H=H, S=S, D=D, causal=causal, capi_ms=capi_ms, op_ms=op_ms,
                   op_fwd_bwd_ms=train_ms, cudnn_ms=cudnn_ms, op_tflops=flops(B, H, S, S, D, causal) / op_ms / 1e9,
                   overhead=op_ms / capi_ms - 1)
        rows.append(row)
        name = f"B{B} S{S} H{H} D{D}{' causal' if causal else ''}"
        print(f"{name:28s} {capi_ms:9.3f} {op_ms:9.3f} {train_ms:11.3f} {cudnn_ms:9.3f} {op_ms / capi_ms:9.2f}x",
              flush=True)
    print("wrote", write_rows(args.out, "bench_torch_ops.jsonl", rows))


if __name__ == "__main__":
    main()
