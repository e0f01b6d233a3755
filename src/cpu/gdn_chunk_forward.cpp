// src/cpu/gdn_chunk_forward.cpp — the chunked gated delta rule forward on the CPU, as spec/gdn.md
// states it: chunk C = 64, WY form, the state H carried across chunks. Any gate width.
#include <algorithm>
#include <cmath>

#include "src/cpu/gdn_chunk_wy.hpp"

namespace attnkit::cpu {

template <class Acc>
void gdn_chunk_forward(const GdnHead<Acc>& x, Acc scale, Acc* o, Acc* ht, std::vector<Acc>* chunk_states) {
  const int64_t K = x.K, V = x.V;
  std::vector<Acc> H(x.h0);  // [K, V] state at the start of the current chunk
  if (chunk_states) chunk_states->clear();
  for (int64_t t0 = 0; t0 < x.T; t0 += kGdnChunk) {
    const int64_t L = std::min(kGdnChunk, x.T - t0);
    if (chunk_states) chunk_states->insert(chunk_states->end(), H.begin(), H.end());
    const ChunkWY<Acc> c = prepare_chunk(x, t0, L);
    const std::vector<Acc> vn = new_values(c, H.data(), K, V);
    const Acc* q = x.q.data() + t0 * K;
    const Acc* k = x.k.data() + t0 * K;
    // o_i = scale * [ (q_i * exp(gamma_i)) H + sum_{j<=i} <q_i, k_j>_Gamma v_new_j ]
    for (int64_t i = 0; i < L; ++i) {
      Acc* oi = o + (t0 + i) * V;
      std::fill(oi, oi + V, Acc(0));
      for (int64_t d = 0; d < K; ++d) {
        const Acc qd = q[i * K + d] * std::exp(c.gam(i, d));
        for (int64_t e = 0; e < V; ++e) oi[e] += qd * H[d * V + e];
      }
      for (int64_t j = 0; j <= i; ++j) {
        const Acc a = gated_dot(c, q + i * K, i, k + j * K, j, K);
        for (int64_t e = 0; e < V; ++e) oi[e] += a * vn[j * V + e];
      }
      for (int64_t e = 0; e < V; ++e) oi[e] *= scale;
    }
    // H <- diag(exp(gamma_last)) H + sum_j (k_j * exp(gamma_last - gamma_j)) v_new_j^T
    for (int64_t d = 0; d < K; ++d) {
      const Acc decay = std::exp(c.last(d));
      for (int64_t e = 0; e < V; ++e) H[d * V + e] *= decay;
      for (int64_t j = 0; j < L; ++j) {
        const Acc kd = k[j * K + d] * std::exp(c.last(d) - c.gam(j, d));
        for (int64_t e = 0; e < V; ++e) H[d * V + e] += kd * vn[j * V + e];
      }
    }
  }
  std::copy(H.begin(), H.end(), ht);
}

template void gdn_chunk_forward<float>(const GdnHead<float>&, float, float*, float*, std::vector<float>*);
template void gdn_chunk_forward<double>(const GdnHead<double>&, double, double*, double*, std::vector<double>*);

}  // namespace attnkit::cpu
