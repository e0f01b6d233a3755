// src/cpu/gdn_recurrent.cpp — the token recurrence of spec/gdn.md (the ground truth, also the
// decode op) and its exact reverse-mode gradient, for scalar and per-key gates alike:
//   h <- diag(exp(g_t)) h ; u_t = beta_t (v_t - h^T k_t) ; h <- h + k_t u_t^T ; o_t = h^T (scale q_t)
#include <algorithm>
#include <cmath>

#include "src/cpu/gdn_head.hpp"

namespace attnkit::cpu {
namespace {

// One token step on h [K, V]; also returns u_t [V] and, when h_decayed is given, the decayed state.
template <class Acc>
void step(const GdnHead<Acc>& x, int64_t t, Acc* h, Acc* u, Acc* h_decayed) {
  const int64_t K = x.K, V = x.V;
  const Acc* k = x.k.data() + t * K;
  for (int64_t d = 0; d < K; ++d) {
    const Acc decay = std::exp(x.gate(t, d));
    for (int64_t e = 0; e < V; ++e) h[d * V + e] *= decay;
  }
  if (h_decayed) std::copy(h, h + K * V, h_decayed);
  for (int64_t e = 0; e < V; ++e) {
    Acc p = 0;
    for (int64_t d = 0; d < K; ++d) p += h[d * V + e] * k[d];
    u[e] = x.beta[t] * (x.v[t * V + e] - p);
  }
  for (int64_t d = 0; d < K; ++d)
    for (int64_t e = 0; e < V; ++e) h[d * V + e] += k[d] * u[e];
}

}  // namespace

template <class Acc>
void gdn_recurrent_forward(const GdnHead<Acc>& x, Acc scale, Acc* o, Acc* h) {
  const int64_t K = x.K, V = x.V;
  std::vector<Acc> u(static_cast<size_t>(V));
  for (int64_t t = 0; t < x.T; ++t) {
    step(x, t, h, u.data(), static_cast<Acc*>(nullptr));
    const Acc* q = x.q.data() + t * K;
    for (int64_t e = 0; e < V; ++e) {
      Acc s = 0;
      for (int64_t d = 0; d < K; ++d) s += h[d * V + e] * q[d];
      o[t * V + e] = scale * s;
    }
  }
}

// Reverse mode, recomputing the states of each 64-token segment from a checkpoint.
template <class Acc>
GdnHeadGrad<Acc> gdn_recurrent_backward(const GdnHead<Acc>& x, Acc scale, const Acc* do_, const Acc* dht) {
  const int64_t T = x.T, K = x.K, V = x.V, KV = K * V, seg = 64;
  const int64_t nseg = (T + seg - 1) / seg;
  // Checkpoints: the state before each segment [nseg, K, V].
  std::vector<Acc> ckpt(static_cast<size_t>(nseg * KV)), h(x.h0), u(static_cast<size_t>(V));
  for (int64_t t = 0; t < T; ++t) {
    if (t % seg == 0) std::copy(h.begin(), h.end(), ckpt.begin() + (t / seg) * KV);
    step(x, t, h.data(), u.data(), static_cast<Acc*>(nullptr));
  }
  GdnHeadGrad<Acc> r;
  r.dq.assign(static_cast<size_t>(T * K), Acc(0));
  r.dk.assign(static_cast<size_t>(T * K), Acc(0));
  r.dv.assign(static_cast<size_t>(T * V), Acc(0));
  r.dbeta.assign(static_cast<size_t>(T), Acc(0));
  r.dg.assign(static_cast<size_t>(T * x.gdim), Acc(0));
  std::vector<Acc> dh(static_cast<size_t>(KV), Acc(0));  // gradient of the state after token t
  if (dht) std::copy(dht, dht + KV, dh.begin());
  // Per segment: the decayed state ha_t, u_t and the post-update state h_t of every token.
  std::vector<Acc> ha(static_cast<size_t>(seg * KV)), hs(static_cast<size_t>(seg * KV)), us(static_cast<size_t>(seg * V));
  for (int64_t s = nseg - 1; s >= 0; --s) {
    const int64_t t0 = s * seg, t1 = std::min(T, t0 + seg);
    std::copy(ckpt.begin() + s * KV, ckpt.begin() + (s + 1) * KV, h.begin());
    for (int64_t t = t0; t < t1; ++t) {
      step(x, t, h.data(), us.data() + (t - t0) * V, ha.data() + (t - t0) * KV);
      std::copy(h.begin(), h.end(), hs.begin() + (t - t0) * KV);
    }
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const Acc *q = x.q.data() + t * K, *k = x.k.data() + t * K, *dO = do_ + t * V;
      const Acc *hA = ha.data() + (t - t0) * KV, *hT = hs.data() + (t - t0) * KV, *ut = us.data() + (t - t0) * V;
      // o_t = scale h_t^T q_t
      for (int64_t d = 0; d < K; ++d) {
        Acc s2 = 0;
        for (int64_t e = 0; e < V; ++e) {
          s2 += hT[d * V + e] * dO[e];
          dh[d * V + e] += scale * q[d] * dO[e];
        }
        r.dq[t * K + d] = scale * s2;
      }
      // h_t = ha + k u^T ; u = beta (v - ha^T k)
      std::vector<Acc> du(static_cast<size_t>(V), Acc(0));
      for (int64_t d = 0; d < K; ++d)
        for (int64_t e = 0; e < V; ++e) {
          r.dk[t * K + d] += dh[d * V + e] * ut[e];
          du[e] += dh[d * V + e] * k[d];
        }
      Acc db = 0;
      for (int64_t e = 0; e < V; ++e) {
        Acc p = 0;  // (ha^T k)_e
        for (int64_t d = 0; d < K; ++d) p += hA[d * V + e] * k[d];
        db += du[e] * (x.v[t * V + e] - p);
        r.dv[t * V + e] = x.beta[t] * du[e];
      }
      r.dbeta[t] = db;
      for (int64_t d = 0; d < K; ++d)
        for (int64_t e = 0; e < V; ++e) {
          const Acc dp = -x.beta[t] * du[e];
          r.dk[t * K + d] += hA[d * V + e] * dp;
          dh[d * V + e] += k[d] * dp;  // dh now holds the gradient of ha
        }
      // ha = diag(exp(g)) h_{t-1}
      for (int64_t d = 0; d < K; ++d) {
        Acc dgd = 0;
        const Acc decay = std::exp(x.gate(t, d));
        for (int64_t e = 0; e < V; ++e) {
          dgd += dh[d * V + e] * hA[d * V + e];
          dh[d * V + e] *= decay;
        }
        r.dg[t * x.gdim + (x.gdim == 1 ? 0 : d)] += dgd;
      }
    }
  }
  r.dh0 = dh;
  return r;
}

template <class Acc>
void gdn_segment_affine(const GdnHead<Acc>& x, int64_t t0, int64_t t1, Acc* M, Acc* S) {
  const int64_t K = x.K, V = x.V;
  std::fill(M, M + K * K, Acc(0));
  for (int64_t d = 0; d < K; ++d) M[d * K + d] = 1;
  std::fill(S, S + K * V, Acc(0));
  std::vector<Acc> u(static_cast<size_t>(V)), p(static_cast<size_t>(K));
  for (int64_t t = t0; t < t1; ++t) {
    step(x, t, S, u.data(), static_cast<Acc*>(nullptr));
    // M's columns evolve as states with v = 0: h <- diag(e^g) h, then h <- h - beta k (h^T k)^T.
    const Acc* k = x.k.data() + t * K;
    for (int64_t d = 0; d < K; ++d) {
      const Acc decay = std::exp(x.gate(t, d));
      for (int64_t e = 0; e < K; ++e) M[d * K + e] *= decay;
    }
    for (int64_t e = 0; e < K; ++e) {
      Acc s = 0;
      for (int64_t d = 0; d < K; ++d) s += M[d * K + e] * k[d];
      p[e] = x.beta[t] * s;
    }
    for (int64_t d = 0; d < K; ++d)
      for (int64_t e = 0; e < K; ++e) M[d * K + e] -= k[d] * p[e];
  }
}

template void gdn_segment_affine<double>(const GdnHead<double>&, int64_t, int64_t, double*, double*);
template void gdn_recurrent_forward<float>(const GdnHead<float>&, float, float*, float*);
template void gdn_recurrent_forward<double>(const GdnHead<double>&, double, double*, double*);
template GdnHeadGrad<float> gdn_recurrent_backward<float>(const GdnHead<float>&, float, const float*, const float*);
template GdnHeadGrad<double> gdn_recurrent_backward<double>(const GdnHead<double>&, double, const double*, const double*);

}  // namespace attnkit::cpu
