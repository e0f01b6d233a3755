"""bench/model_gdn_fold.py — CPU model (float64 torch) of the numerics of folding a GDN state pass's
chunk step into one GEMM with a 16-bit matrix (docs/perf/gdn_bwd_dhu.md, sketch v9):
  bwd_dhu:  dH' = M dH + R,  M = e^G_last I - w^T diag(fk) K,   R = Q^T (fq do) - w^T dv
  forward:  H'  = M H + R,   M = e^G_last I - (diag(gamma) K)^T w,  R = (diag(gamma) K)^T u
Rel RMS of the state per chunk and of the final one (dh0 / ht) against float64 on the same 16-bit
inputs, for today's kernel scheme (the state and dv2 / v_new rounded each step) and the folded one,
bf16 / fp16, three gate strengths.

    python3 bench/model_gdn_fold.py [chunks=128]      # K = V = 128, one head, no GPU needed
"""
import torch, math, sys
torch.manual_seed(0)
K = V = 128; C = 64; NT = int(sys.argv[1]) if len(sys.argv) > 1 else 128
T = NT * C
def rnd(x, dt): return x.to(dt).to(torch.float64)
print("bwd_dhu:")
for dt in (torch.bfloat16, torch.float16):
  for glo in (0.0, -0.1, -1.0):
    q = rnd(torch.randn(T, K, dtype=torch.float64), dt)
    k = torch.nn.functional.normalize(torch.randn(T, K, dtype=torch.float64), dim=-1)
    beta = torch.rand(T, 1, dtype=torch.float64) * 0.8 + 0.1
    w = rnd(beta * k, dt); k = rnd(k, dt)
    do = rnd(torch.randn(T, V, dtype=torch.float64), dt); dv = rnd(torch.randn(T, V, dtype=torch.float64), dt)
    g = (torch.rand(T, dtype=torch.float64) * glo).view(NT, C).cumsum(1).view(T)  # in-chunk cumulative
    dht = torch.randn(K, V, dtype=torch.float64)
    scale = K ** -0.5
    def run(mode):
        dH = dht.clone(); dhs = []
        for j in reversed(range(NT)):
            s = slice(j * C, (j + 1) * C)
            G = g[s]; GL = G[-1]
            fq = scale * torch.exp(G)[:, None]; fk = torch.exp(GL - G)[:, None]
            Q, Kc, W = q[s], k[s], w[s]
            if mode == "f64":
                dhs.append(dH.clone())
                dv2 = dv[s] + fk * (Kc @ dH)
                dH = math.exp(GL) * dH + Q.T @ (fq * do[s]) - W.T @ dv2
            elif mode == "today":
                dHb = rnd(dH, dt); dhs.append(dHb)
                fqdo = rnd(fq * do[s], dt)
                dv2 = rnd(dv[s] + fk * (Kc @ dHb), dt)
                dH = math.exp(GL) * dH + Q.T @ fqdo - W.T @ dv2
            else:  # folded: M in 16 bits, R in fp32 (from 16-bit operands), dH published in 16 bits
                dHb = rnd(dH, dt); dhs.append(dHb)
                fqdo = rnd(fq * do[s], dt)
                Kf = rnd(fk * Kc, dt)  # the producer's fk K operand
                M = rnd(math.exp(GL) * torch.eye(K, dtype=torch.float64) - W.T @ Kf, dt)
                R = Q.T @ fqdo - W.T @ dv[s]
                dH = R + M @ dHb
        return torch.stack(dhs[::-1]), dH
    ref_dh, ref_dh0 = run("f64")
    rel = lambda a, b: ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt()).item()
    out = []
    for mode in ("today", "folded"):
        dh, dh0 = run(mode)
        out.append(f"{mode}: dh {rel(dh, ref_dh):.2e} dh0 {rel(dh0, ref_dh0):.2e}")
    print(f"{str(dt)[6:]:9s} g in [{glo}, 0]: " + " | ".join(out), flush=True)


# The forward's state pass (v_new = u - w H; H' = e^G_last H + (diag(gamma) K)^T v_new).
print("forward:")
torch.manual_seed(0)
for dt in (torch.bfloat16, torch.float16):
  for glo in (0.0, -0.1, -1.0):
    k = torch.nn.functional.normalize(torch.randn(T, K, dtype=torch.float64), dim=-1)
    beta = torch.rand(T, 1, dtype=torch.float64) * 0.8 + 0.1
    w = rnd(beta * k, dt); k = rnd(k, dt)   # w as the WY kernel gives it (16-bit), k 16-bit
    u = rnd(torch.randn(T, V, dtype=torch.float64) * 0.5, dt)
    g = (torch.rand(T, dtype=torch.float64) * glo).view(NT, C).cumsum(1).view(T)
    h0 = torch.randn(K, V, dtype=torch.float64)
    def run(mode):
        H = h0.clone(); hs = []
        for j in range(NT):
            s = slice(j * C, (j + 1) * C)
            G = g[s]; GL = G[-1]; gam = torch.exp(GL - G)[:, None]  # K's row factors to the chunk end
            Kc, W, U = k[s], w[s], u[s]
            if mode == "f64":
                hs.append(H.clone())
                vn = U - W @ H
                H = math.exp(GL) * H + (gam * Kc).T @ vn
            elif mode == "today":
                Hb = rnd(H, dt); hs.append(Hb)
                vn = rnd(U - W @ Hb, dt)
                H = math.exp(GL) * H + rnd(gam * Kc, dt).T @ vn
            else:
                Hb = rnd(H, dt); hs.append(Hb)
                Kg = rnd(gam * Kc, dt)
                M = rnd(math.exp(GL) * torch.eye(K, dtype=torch.float64) - Kg.T @ W, dt)
                R = Kg.T @ U
                H = R + M @ Hb
        return torch.stack(hs), H
    ref_h, ref_ht = run("f64")
    rel = lambda a, b: ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt()).item()
    out = []
    for mode in ("today", "folded"):
        h, ht = run(mode)
        out.append(f"{mode}: H {rel(h, ref_h):.2e} ht {rel(ht, ref_ht):.2e}")
    print(f"{str(dt)[6:]:9s} g in [{glo}, 0]: " + " | ".join(out), flush=True)
