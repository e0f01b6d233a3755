"""attnkit's Hopper forward against torch SDPA on the same inputs (issue 3's error rule):
max |ours - ref64| <= 2 * max |sdpa_bf16 - ref64| + 1e-3, with ref64 a float64 softmax attention.
Outputs are NaN-poisoned before each launch. Runs on the GPU machine (skips elsewhere)."""
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F


def reference(q, k, v, causal_bottom_right, window=None, softcap=0.0):
    """float64 attention on [B, H, S, D]; bottom-right causal alignment as flash_attn."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    Hq, Hkv = q.shape[1], k.shape[1]
    if Hq != Hkv:
        k64 = k64.repeat_interleave(Hq // Hkv, dim=1)
        v64 = v64.repeat_interleave(Hq // Hkv, dim=1)
    s = q64 @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    Sq, Sk = q.shape[2], k.shape[2]
    i = torch.arange(Sq, device=q.device)[:, None]
    j = torch.arange(Sk, device=q.device)[None, :]
    diag = i + (Sk - Sq)
    vis = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device)
    if causal_bottom_right:
        vis &= j <= diag
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return p @ v64


CASES = [  # B, Hq, Hkv, Sq, Sk, D, causal
    (2, 4, 4, 1, 1, 64, False),
    (2, 4, 4, 17, 17, 128, True),
    (1, 8, 2, 63, 65, 128, False),
    (1, 8, 1, 127, 1000, 64, True),
    (2, 4, 4, 1000, 1000, 256, True),
    (1, 32, 8, 513, 513, 128, True),
    (4, 4, 4, 256, 256, 256, False),
]


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,causal", CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_error_within_twice_sdpa(attnkit_lib, B, Hq, Hkv, Sq, Sk, D, causal, dtype):
    torch.manual_seed(0)
    q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=dtype)
    k = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=dtype)
    v = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=dtype)
    ref = reference(q, k, v, causal)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((B, Hq, Sq), float("nan"), device="cuda", dtype=torch.float32)
    attnkit_lib.fwd(q, k, v, out, lse, causal, 1)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "unwritten or non-finite outputs"
    # SDPA's is_causal is top-left aligned; give it the bottom-right mask explicitly.
    mask = None
    if causal:
        i = torch.arange(Sq, device="cuda")[:, None]
        j = torch.arange(Sk, device="cuda")[None, :]
        mask = j <= i + (Sk - Sq)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=Hq != Hkv)
    rows_visible = torch.isfinite(ref).all(-1, keepdim=True)
    sdpa = torch.where(rows_visible, sdpa.double().nan_to_num(0.0), 0.0)
    err_ours = (out.double() - ref).abs().max().item()
    err_sdpa = (sdpa - ref).abs().max().item()
    assert err_ours <= 2 * err_sdpa + 1e-3, (err_ours, err_sdpa)
