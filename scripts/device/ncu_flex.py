"""scripts/device/ncu_flex.py — one flex forward and backward per case, for Nsight Compute:

    ncu --set full -k regex:attention_ -c 4 -o OUT python3 scripts/device/ncu_flex.py [cases]

cases (default "noop sliding1024"): PEERS.md's flex shape (B1 H16 S16384 D128 bf16), the mods of
bench/bench_flex.py. Each case runs its forward then its backward once, in that order."""
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask

import attnkit
from attnkit import flex

B, H, S, D = 1, 16, 16384, 128
MASKS = {
    "noop": None,
    "causal": flex.causal(),
    "sliding1024": flex.and_masks(flex.causal(), flex.sliding_window(1024)),
}

for name in sys.argv[1:] or ["noop", "sliding1024"]:
    q, k, v, dout = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(4))
    mask = MASKS[name]
    block_mask = create_block_mask(mask, B, None, S, S, device="cuda") if mask is not None else None
    out = attnkit.flex_attention(q, k, v, block_mask=block_mask)
    out.backward(dout.detach())
    torch.cuda.synchronize()
    print(name, "done")
