// src/cpu/gdn_bwd_dhu.cpp — the standalone reverse state-gradient pass ("bwd_dhu") on the CPU, as
// include/attnkit/gdn.hpp states it; one task per (sequence, value head), chunks of 64 from the last.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/cpu/parallel.hpp"
#include "attnkit/semantics/numerics.hpp"
#include "src/cpu/backend.hpp"
#include "src/cpu/gdn_io.hpp"

namespace attnkit::cpu {
namespace {

template <class Acc>
void run(const GdnBwdDhuParams& p) {
  const GdnLayout lay(p.q, p.dout, p.cu_seqlens);
  const int64_t K = lay.K, V = lay.V, HV = lay.HV, G = p.gk.defined() ? K : 1;
  const Acc scale = static_cast<Acc>(p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(K)));
  // First global chunk of each sequence (varlen chunks are numbered sequence by sequence).
  std::vector<int64_t> chunk0(static_cast<size_t>(lay.num_seqs) + 1, 0);
  for (int64_t n = 0; n < lay.num_seqs; ++n) chunk0[n + 1] = chunk0[n] + (lay.seq_len(n) + kGdnChunk - 1) / kGdnChunk;
  const bool varlen = p.cu_seqlens.defined();
  parallel_for(lay.num_seqs * HV, [&](int64_t task) {
    const int64_t n = task / HV, hv = task % HV, h = qk_head_of(hv, HV, lay.H), T = lay.seq_len(n);
    const std::vector<Acc> q = gather<Acc>(lay.slice(p.q, n, h)), k = gather<Acc>(lay.slice(p.k, n, h));  // [T, K]
    const std::vector<Acc> w = gather<Acc>(lay.slice(p.w, n, hv));                                        // [T, K]
    const std::vector<Acc> dO = gather<Acc>(lay.slice(p.dout, n, hv)), dv = gather<Acc>(lay.slice(p.dv, n, hv));  // [T, V]
    std::vector<Acc> gam(static_cast<size_t>(T * G), Acc(0));  // [T, G] in-chunk cumulative log-decay
    if (p.g.defined()) gam = gather<Acc>(lay.slice(p.g, n, hv));
    if (p.gk.defined()) gam = gather<Acc>(lay.slice(p.gk, n, hv));
    if (p.gates_log2)
      for (Acc& x : gam) x *= Acc(kLn2);  // base-2 log-decays to natural
    auto G_at = [&](int64_t t, int64_t d) { return gam[t * G + (G == 1 ? 0 : d)]; };
    // The gate folded into Q and K here: g's; gk's is already in them (see attnkit/gdn.hpp).
    auto Gqk = [&](int64_t t) { return G == 1 ? gam[t] : Acc(0); };
    std::vector<Acc> dH(static_cast<size_t>(K * V), Acc(0)), dv2(dv);  // [K, V], [T, V]
    if (p.dht.defined()) gather(state_slice(p.dht, n, hv, p.state_layout), dH.data());
    const int64_t nc = (T + kGdnChunk - 1) / kGdnChunk, b = varlen ? 0 : n;
    for (int64_t c = nc - 1; c >= 0; --c) {
      const int64_t t0 = c * kGdnChunk, L = std::min(kGdnChunk, T - t0), tl = t0 + L - 1;
      const int64_t chunk = (varlen ? chunk0[n] : 0) + c;  // dh [B, NT, HV, K, V]: this chunk's K x V
      scatter(kv_matrix(p.dh, b * p.dh.stride(0) + chunk * p.dh.stride(1) + hv * p.dh.stride(2), p.state_layout), dH.data());
      for (int64_t j = t0; j <= tl; ++j)  // dv2 = dv + (K * exp(G_last - G)) dH
        for (int64_t d = 0; d < K; ++d) {
          const Acc kd = k[j * K + d] * std::exp(Gqk(tl) - Gqk(j));
          for (int64_t e = 0; e < V; ++e) dv2[j * V + e] += kd * dH[d * V + e];
        }
      for (int64_t d = 0; d < K; ++d)  // dH = diag(exp(G_last)) dH + scale (Q * exp(G))^T do - w^T dv2
        for (int64_t e = 0; e < V; ++e) {
          Acc acc = std::exp(G_at(tl, d)) * dH[d * V + e];
          for (int64_t i = t0; i <= tl; ++i)
            acc += scale * q[i * K + d] * std::exp(Gqk(i)) * dO[i * V + e] - w[i * K + d] * dv2[i * V + e];
          dH[d * V + e] = acc;
        }
    }
    scatter(lay.slice(p.dv2, n, hv), dv2.data());
    if (p.dh0.defined()) scatter(state_slice(p.dh0, n, hv, p.state_layout), dH.data());
  });
}

}  // namespace

Status gdn_bwd_dhu(const GdnBwdDhuParams& p) {
  if (p.q.dtype == DType::kFloat64) run<double>(p);
  else run<float>(p);
  return Status::Ok();
}

}  // namespace attnkit::cpu
