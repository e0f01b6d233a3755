"""bench/model_gdn_fold.py — CPU model (float64 torch) of the numerics of folding a GDN state pass's
chunk step into one GEMM with a 16-bit matrix (docs/perf/gdn_bwd_dhu.md, sketch v9):
  bwd_dhu:  dH' = M dH + R,  M = e^G_last I - w^T diag(fk) K,   R = Q^T (fq do) - w^T dv
  forward:  H'  = M H + R,   M = e^G_last I - (diag(gamma) K)^T w,  R = (diag(gamma) K)^T u
Rel RMS of the state per chunk and of the final one (dh0 / ht) against float64 on the same 16-bit
inputs, for today's kernel scheme (the state and dv2 / v_new rounded each step) and the folded one,
bf16 / fp16, three gate strengths.

    python3 bench/model_gdn_fold.py [chunks=128]      # K = V = 128, one head, no GPU needed
"""
import math
import sys

import torch

K = V = 128
C = 64
NT = int(sys.argv[1]) if len(sys.argv) > 1 else 128
T = NT * C
F64 = torch.float64


def rnd(x, dt):
    """x rounded to dt, back in float64."""
    return x.to(dt).to(F64)


def rel(a, b):
    return ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt()).item()


def keys_and_gates(dt, glo):
    """Unit keys in dt, w = beta k in dt (as the WY kernel gives it), in-chunk cumulative gates."""
    k = torch.nn.functional.normalize(torch.randn(T, K, dtype=F64), dim=-1)
    beta = torch.rand(T, 1, dtype=F64) * 0.8 + 0.1
    w = rnd(beta * k, dt)
    g = (torch.rand(T, dtype=F64) * glo).view(NT, C).cumsum(1).view(T)
    return rnd(k, dt), w, g


def bwd_dhu_case(dt, glo):
    """run(mode) -> (dh of every chunk, dh0), the reverse pass from dht."""
    q = rnd(torch.randn(T, K, dtype=F64), dt)
    k, w, g = keys_and_gates(dt, glo)
    do, dv = (rnd(torch.randn(T, V, dtype=F64), dt) for _ in range(2))
    dht = torch.randn(K, V, dtype=F64)
    scale = K ** -0.5

    def run(mode):
        dH, dhs = dht.clone(), []
        for j in reversed(range(NT)):
            s = slice(j * C, (j + 1) * C)
            G = g[s]
            GL = G[-1]
            fq, fk = scale * torch.exp(G)[:, None], torch.exp(GL - G)[:, None]
            Q, Kc, W = q[s], k[s], w[s]
            if mode == "f64":
                dhs.append(dH.clone())
                dH = math.exp(GL) * dH + Q.T @ (fq * do[s]) - W.T @ (dv[s] + fk * (Kc @ dH))
                continue
            dHb = rnd(dH, dt)
            dhs.append(dHb)
            fqdo = rnd(fq * do[s], dt)
            if mode == "today":
                dv2 = rnd(dv[s] + fk * (Kc @ dHb), dt)
                dH = math.exp(GL) * dH + Q.T @ fqdo - W.T @ dv2
            else:  # folded: M in 16 bits from the producer's fk K operand, R in fp32
                M = rnd(math.exp(GL) * torch.eye(K, dtype=F64) - W.T @ rnd(fk * Kc, dt), dt)
                dH = Q.T @ fqdo - W.T @ dv[s] + M @ dHb
        return torch.stack(dhs[::-1]), dH
    return run


def forward_case(dt, glo):
    """run(mode) -> (H at every chunk start, the final state), the state pass from h0."""
    k, w, g = keys_and_gates(dt, glo)
    u = rnd(torch.randn(T, V, dtype=F64) * 0.5, dt)
    h0 = torch.randn(K, V, dtype=F64)

    def run(mode):
        H, hs = h0.clone(), []
        for j in range(NT):
            s = slice(j * C, (j + 1) * C)
            G = g[s]
            GL = G[-1]
            Kg = torch.exp(GL - G)[:, None] * k[s]  # K's rows decayed to the chunk end
            W, U = w[s], u[s]
            if mode == "f64":
                hs.append(H.clone())
                H = math.exp(GL) * H + Kg.T @ (U - W @ H)
                continue
            Hb = rnd(H, dt)
            hs.append(Hb)
            if mode == "today":
                H = math.exp(GL) * H + rnd(Kg, dt).T @ rnd(U - W @ Hb, dt)
            else:  # folded: M in 16 bits, R in fp32
                Kg = rnd(Kg, dt)
                H = Kg.T @ U + rnd(math.exp(GL) * torch.eye(K, dtype=F64) - Kg.T @ W, dt) @ Hb
        return torch.stack(hs), H
    return run


def report(title, case, state, final):
    print(f"{title}:")
    torch.manual_seed(0)
    for dt in (torch.bfloat16, torch.float16):
        for glo in (0.0, -0.1, -1.0):
            run = case(dt, glo)
            ref, ref_final = run("f64")
            out = []
            for mode in ("today", "folded"):
                got, got_final = run(mode)
                out.append(f"{mode}: {state} {rel(got, ref):.2e} {final} {rel(got_final, ref_final):.2e}")
            print(f"{str(dt)[6:]:9s} g in [{glo}, 0]: " + " | ".join(out), flush=True)


report("bwd_dhu", bwd_dhu_case, "dh", "dh0")
report("forward", forward_case, "H", "ht")
