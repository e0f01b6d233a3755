"""bench/profile_gdn_chunk.py — one launch of the chunked GDN forward for ncu (after a warm-up):

    ncu --set full -k regex:gdn_chunk -s 1 -c 1 -o OUT/prof python3 bench/profile_gdn_chunk.py [B T H]
"""
import sys

import torch
import torch.nn.functional as F

import attnkit

B, T, H = (int(x) for x in sys.argv[1:4]) if len(sys.argv) >= 4 else (1, 8192, 16)
D = 128
torch.manual_seed(0)
q, k, v = (torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
g = F.logsigmoid(torch.randn(B, T, H, device="cuda"))
beta = torch.rand(B, T, H, device="cuda", dtype=torch.bfloat16).sigmoid()
for _ in range(2):
    attnkit.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
torch.cuda.synchronize()
