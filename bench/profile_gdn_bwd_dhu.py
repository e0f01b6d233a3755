"""bench/profile_gdn_bwd_dhu.py — attnkit's bwd_dhu at issue 6's shapes through the C ABI, three
launches, for ncu (`-k regex:gdn_bwd_dhu -s 2 -c 1` profiles the third).

    python3 bench/profile_gdn_bwd_dhu.py LIB [none|g|gk]   (B2 T8192 H16; gk: B1 T8192 H64)
"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

from bench_gdn_bwd_dhu import c_abi_dhu, make_inputs

gate = sys.argv[2] if len(sys.argv) > 2 else "none"
B, H = (1, 64) if gate == "gk" else (2, 16)
q, k, w, do, dv, g, gk, dht = make_inputs(B, 8192, H, None if gate == "none" else gate)
run = c_abi_dhu(sys.argv[1])
for _ in range(3):
    run(q, k, w, do, dv, g=g, gk=gk, h0=dht, dht=dht, scale=128 ** -0.5)
torch.cuda.synchronize()
