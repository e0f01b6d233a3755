"""bench/profile_attention.py — one attnkit forward launch of a chosen shape, for ncu to capture.

    ncu --clock-control none -k regex:attention_fwd python3 bench/profile_attention.py --S 2048 --D 128 [--causal]
"""
import argparse

import torch

from bench_attention import Attnkit, load_lib

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default="build-device/tools/libattnkit_c.so")
ap.add_argument("--S", type=int, default=2048)
ap.add_argument("--D", type=int, default=128)
ap.add_argument("--causal", action="store_true")
args = ap.parse_args()
B, H = 16384 // args.S, 2048 // args.D
q = torch.randn(B, H, args.S, args.D, device="cuda", dtype=torch.bfloat16)
k, v = torch.randn_like(q), torch.randn_like(q)
out = torch.empty_like(q)
ak = Attnkit(load_lib(args.lib))
for _ in range(3):
    ak.fwd(q, k, v, out, None, args.causal, 1)
torch.cuda.synchronize()
