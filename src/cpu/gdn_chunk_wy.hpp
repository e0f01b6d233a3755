// src/cpu/gdn_chunk_wy.hpp — the state-independent part of one GDN chunk (spec/gdn.md steps 1-4):
// in-chunk gate cumsum, L, T = (I + L)^-1, w and u; shared by the chunked forward and backward.
// Per-key gates (gk) use the same code: gamma is then [L, K] and every "Gamma_ij (a_i . b_j)"
// becomes sum_d a_id b_jd exp(gamma_id - gamma_jd).
#pragma once
#include <algorithm>
#include <cmath>

#include "src/cpu/gdn_head.hpp"

namespace attnkit::cpu {

// Everything about one chunk that does not depend on the state.
template <class Acc>
struct ChunkWY {
  int64_t t0 = 0, L = 0, gdim = 1;
  std::vector<Acc> gamma;  // [L, gdim] in-chunk cumsum of the gate
  std::vector<Acc> Lm;     // [L, L] strictly lower: beta_i <k_i, k_j>_Gamma
  std::vector<Acc> Tm;     // [L, L] (I + Lm)^-1, unit lower triangular
  std::vector<Acc> w;      // [L, K] T diag(beta) (K * exp(gamma))
  std::vector<Acc> u;      // [L, V] T diag(beta) V

  Acc gam(int64_t i, int64_t d) const { return gamma[i * gdim + (gdim == 1 ? 0 : d)]; }
  Acc last(int64_t d) const { return gam(L - 1, d); }
};

// sum_d a[d] b[d] exp(gamma_i[d] - gamma_j[d]) for rows i >= j of one chunk (exponent <= 0).
template <class Acc>
inline Acc gated_dot(const ChunkWY<Acc>& c, const Acc* a, int64_t i, const Acc* b, int64_t j, int64_t K) {
  if (c.gdim == 1) {
    Acc s = 0;
    for (int64_t d = 0; d < K; ++d) s += a[d] * b[d];
    return s * std::exp(c.gam(i, 0) - c.gam(j, 0));
  }
  Acc s = 0;
  for (int64_t d = 0; d < K; ++d) s += a[d] * b[d] * std::exp(c.gam(i, d) - c.gam(j, d));
  return s;
}

template <class Acc>
ChunkWY<Acc> prepare_chunk(const GdnHead<Acc>& x, int64_t t0, int64_t L) {
  const int64_t K = x.K, V = x.V, G = x.gdim;
  ChunkWY<Acc> c;
  c.t0 = t0;
  c.L = L;
  c.gdim = G;
  c.gamma.assign(static_cast<size_t>(L * G), Acc(0));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t d = 0; d < G; ++d)
      c.gamma[i * G + d] = (i ? c.gamma[(i - 1) * G + d] : Acc(0)) + x.g[(t0 + i) * G + d];
  const Acc* k = x.k.data() + t0 * K;
  c.Lm.assign(static_cast<size_t>(L * L), Acc(0));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j) c.Lm[i * L + j] = x.beta[t0 + i] * gated_dot(c, k + i * K, i, k + j * K, j, K);
  // Forward substitution: row i of T is e_i - sum_{j<i} Lm_ij T_j.
  c.Tm.assign(static_cast<size_t>(L * L), Acc(0));
  for (int64_t i = 0; i < L; ++i) {
    c.Tm[i * L + i] = 1;
    for (int64_t j = 0; j < i; ++j) {
      const Acc lij = c.Lm[i * L + j];
      if (lij == Acc(0)) continue;
      for (int64_t col = 0; col <= j; ++col) c.Tm[i * L + col] -= lij * c.Tm[j * L + col];
    }
  }
  c.w.assign(static_cast<size_t>(L * K), Acc(0));
  c.u.assign(static_cast<size_t>(L * V), Acc(0));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      const Acc tb = c.Tm[i * L + j] * x.beta[t0 + j];
      for (int64_t d = 0; d < K; ++d) c.w[i * K + d] += tb * k[j * K + d] * std::exp(c.gam(j, d));
      for (int64_t e = 0; e < V; ++e) c.u[i * V + e] += tb * x.v[(t0 + j) * V + e];
    }
  return c;
}

// v_new = u - w H   [L, V]
template <class Acc>
std::vector<Acc> new_values(const ChunkWY<Acc>& c, const Acc* H, int64_t K, int64_t V) {
  std::vector<Acc> vn(c.u);
  for (int64_t i = 0; i < c.L; ++i)
    for (int64_t d = 0; d < K; ++d) {
      const Acc wd = c.w[i * K + d];
      for (int64_t e = 0; e < V; ++e) vn[i * V + e] -= wd * H[d * V + e];
    }
  return vn;
}


}  // namespace attnkit::cpu
