"""Plain-torch references for the op tests: softmax attention and the gated delta rule token
recurrence, written straight from ../shared/spec (attention.md, gdn.md), differentiable, meant for
float64 inputs."""

import math

import torch


def rms_ratio(x, ref):
    """RMS(x - ref) / RMS(ref), FLA's metric."""
    x, ref = x.double(), ref.double()
    return ((x - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def visible(sq, sk, causal=False, top_left=False, window=(-1, -1), device="cpu"):
    """[Sq, Sk] bool: key j visible to query i (spec/attention.md, Score and mask)."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    diag = i + (0 if top_left else sk - sq)
    left, right = window
    if causal:
        right = 0
    keep = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        keep &= j >= diag - left
    if right >= 0:
        keep &= j <= diag + right
    return keep


def attention(q, k, v, causal=False, top_left=False, window=(-1, -1), softcap=0.0, scale=None):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> out [B, Sq, Hq, Dv], lse [B, Hq, Sq]."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    k = k.repeat_interleave(Hq // Hkv, dim=2)
    v = v.repeat_interleave(Hq // Hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~visible(Sq, Sk, causal, top_left, window, q.device), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None].masked_fill(lse[..., None] == float("-inf"), 0.0))
    return torch.einsum("bhqk,bkhd->bqhd", p, v), lse


def _l2norm(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def gdn(q, k, v, beta, g=None, gk=None, A_log=None, dt_bias=None, initial_state=None, cu_seqlens=None, scale=None,
        state_v_first=False, use_qk_l2norm=False, beta_is_logit=False):
    """The token recurrence of spec/gdn.md -> (o [B, T, HV, V], final_state [N, HV, K, V] fp64)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    scale = K ** -0.5 if scale is None else scale
    q, k, v, beta = q.double(), k.double(), v.double(), beta.double()
    if use_qk_l2norm:
        q, k = _l2norm(q), _l2norm(k)
    if beta_is_logit:
        beta = torch.sigmoid(beta)
    if A_log is not None:
        g = -torch.exp(A_log.double()) * torch.nn.functional.softplus(g.double() + dt_bias.double())
    q = q.repeat_interleave(HV // H, dim=2)
    k = k.repeat_interleave(HV // H, dim=2)
    bounds = ([(0, T, b) for b in range(B)] if cu_seqlens is None else
              [(int(cu_seqlens[n]), int(cu_seqlens[n + 1]), 0) for n in range(len(cu_seqlens) - 1)])
    outs, finals = [], []
    for n, (start, end, b) in enumerate(bounds):
        h = torch.zeros(HV, K, V, dtype=torch.float64)
        if initial_state is not None:
            h0 = initial_state[n].double()
            h = h0.transpose(-1, -2) if state_v_first else h0
        rows = []
        for t in range(start, end):
            if g is not None:
                h = torch.exp(g[b, t].double())[:, None, None] * h
            if gk is not None:
                h = torch.exp(gk[b, t].double())[:, :, None] * h
            u = beta[b, t][:, None] * (v[b, t] - torch.einsum("hkv,hk->hv", h, k[b, t]))
            h = h + k[b, t][:, :, None] * u[:, None, :]
            rows.append(torch.einsum("hkv,hk->hv", h, scale * q[b, t]))
        outs.append(torch.stack(rows) if rows else torch.zeros(0, HV, V, dtype=torch.float64))
        finals.append(h.transpose(-1, -2) if state_v_first else h)
    o = torch.stack(outs) if cu_seqlens is None else torch.cat(outs)[None]
    return o, torch.stack(finals)


def bwd_dhu(q, k, w, do, dv, g=None, gk=None, dht=None, cu_seqlens=None, scale=None):
    """The reverse state-gradient pass of attnkit/gdn.hpp (chunk 64, natural-log in-chunk cumulative
    gates, K-first states; with gk, q and k come already gated) -> (dh [B, NT, HV, K, V],
    dh0 [N, HV, K, V], dv2), in float64."""
    B, T, H, K = q.shape
    HV, V = do.shape[2], do.shape[3]
    scale = K ** -0.5 if scale is None else scale
    q, k = (t.double().repeat_interleave(HV // H, dim=2) for t in (q, k))
    w, do, dv2 = w.double(), do.double(), dv.double().clone()
    bounds = ([(0, T, b) for b in range(B)] if cu_seqlens is None else
              [(int(cu_seqlens[n]), int(cu_seqlens[n + 1]), 0) for n in range(len(cu_seqlens) - 1)])
    dh_rows, dh0 = [[] for _ in range(B)], []
    for n, (start, end, b) in enumerate(bounds):
        dH = dht[n].double() if dht is not None else torch.zeros(HV, K, V, dtype=torch.float64)
        chunks = list(range(start, end, 64))
        per_chunk = [None] * len(chunks)
        for ci in reversed(range(len(chunks))):
            c0, c1 = chunks[ci], min(chunks[ci] + 64, end)
            per_chunk[ci] = dH
            Kc, Qc, Wc, dOc = k[b, c0:c1], q[b, c0:c1], w[b, c0:c1], do[b, c0:c1]  # [L, HV, K|V]
            # G folded into q and k (g's), and the per-key decay of dH (g's or gk's last row); with
            # gk, q and k come already gated (FLA's convention).
            G = (g[b, c0:c1].double()[..., None].expand(-1, -1, K) if g is not None
                 else torch.zeros(c1 - c0, HV, K, dtype=torch.float64))  # [L, HV, K]
            Gl = gk[b, c1 - 1].double() if gk is not None else G[-1]     # [HV, K]
            dv2[b, c0:c1] += torch.einsum("lhk,hkv->lhv", Kc * torch.exp(G[-1][None] - G), dH)
            dH = (torch.exp(Gl)[..., None] * dH + scale * torch.einsum("lhk,lhv->hkv", Qc * torch.exp(G), dOc)
                  - torch.einsum("lhk,lhv->hkv", Wc, dv2[b, c0:c1]))
        dh_rows[b] += per_chunk
        dh0.append(dH)
    dh = torch.stack([torch.stack(rows) for rows in dh_rows if rows or cu_seqlens is None])
    return dh, torch.stack(dh0), dv2
