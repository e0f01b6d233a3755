// src/cpu/gdn_chunk_backward.cpp — the chunked gated delta rule backward on the CPU, step for
// step as spec/gdn.md "Backward" (scalar or absent gate): a forward pass that keeps the chunk
// start states, the reverse state-gradient pass (bwd_dhu), then per chunk the output/state part
// and the WY part. Per-key gates use gdn_recurrent_backward instead.
#include <algorithm>
#include <cmath>

#include "src/cpu/gdn_chunk_wy.hpp"

namespace attnkit::cpu {
namespace {

// The reverse pass. Returns dh_end [num_chunks, K, V] (gradient of every chunk's END state) and
// dv2 [T, V]; leaves dh0 (the gradient of the start state) in dH.
template <class Acc>
void reverse_state_pass(const GdnHead<Acc>& x, Acc scale, const Acc* do_, std::vector<Acc>& dH,
                        std::vector<Acc>& dh_end, std::vector<Acc>& dv2) {
  const int64_t K = x.K, V = x.V, nc = (x.T + kGdnChunk - 1) / kGdnChunk;
  dh_end.assign(static_cast<size_t>(nc * K * V), Acc(0));
  dv2.assign(static_cast<size_t>(x.T * V), Acc(0));
  for (int64_t n = nc - 1; n >= 0; --n) {
    const int64_t t0 = n * kGdnChunk, L = std::min(kGdnChunk, x.T - t0);
    const ChunkWY<Acc> c = prepare_chunk(x, t0, L);
    std::copy(dH.begin(), dH.end(), dh_end.begin() + n * K * V);
    const Acc* q = x.q.data() + t0 * K;
    const Acc* k = x.k.data() + t0 * K;
    const Acc* dO = do_ + t0 * V;
    Acc* d2 = dv2.data() + t0 * V;
    const Acc gl = c.last(0);
    // dv2_j = scale * sum_{i>=j} Gamma_ij (q_i.k_j) do_i + exp(gl - gamma_j) (K dH)_j
    for (int64_t j = 0; j < L; ++j) {
      for (int64_t i = j; i < L; ++i) {
        const Acc a = scale * gated_dot(c, q + i * K, i, k + j * K, j, K);
        for (int64_t e = 0; e < V; ++e) d2[j * V + e] += a * dO[i * V + e];
      }
      const Acc decay = std::exp(gl - c.gam(j, 0));
      for (int64_t d = 0; d < K; ++d) {
        const Acc kd = decay * k[j * K + d];
        for (int64_t e = 0; e < V; ++e) d2[j * V + e] += kd * dH[d * V + e];
      }
    }
    // dH <- exp(gl) dH + scale (diag(exp(gamma)) Q)^T do - w^T dv2
    for (int64_t d = 0; d < K; ++d)
      for (int64_t e = 0; e < V; ++e) {
        Acc acc = std::exp(gl) * dH[d * V + e];
        for (int64_t i = 0; i < L; ++i)
          acc += scale * std::exp(c.gam(i, 0)) * q[i * K + d] * dO[i * V + e] - c.w[i * K + d] * d2[i * V + e];
        dH[d * V + e] = acc;
      }
  }
}

}  // namespace

template <class Acc>
GdnHeadGrad<Acc> gdn_chunk_backward(const GdnHead<Acc>& x, Acc scale, const Acc* do_, const Acc* dht) {
  const int64_t T = x.T, K = x.K, V = x.V;
  std::vector<Acc> o(static_cast<size_t>(T * V)), ht(static_cast<size_t>(K * V)), Hs;
  gdn_chunk_forward(x, scale, o.data(), ht.data(), &Hs);  // Hs [num_chunks, K, V] start states

  std::vector<Acc> dH(static_cast<size_t>(K * V), Acc(0)), dh_end, dv2;
  if (dht) std::copy(dht, dht + K * V, dH.begin());
  reverse_state_pass(x, scale, do_, dH, dh_end, dv2);

  GdnHeadGrad<Acc> r;
  r.dh0 = dH;
  r.dq.assign(static_cast<size_t>(T * K), Acc(0));
  r.dk.assign(static_cast<size_t>(T * K), Acc(0));
  r.dv.assign(static_cast<size_t>(T * V), Acc(0));
  r.dbeta.assign(static_cast<size_t>(T), Acc(0));
  r.dg.assign(static_cast<size_t>(T), Acc(0));
  for (int64_t t0 = 0, n = 0; t0 < T; t0 += kGdnChunk, ++n) {
    const int64_t L = std::min(kGdnChunk, T - t0);
    const ChunkWY<Acc> c = prepare_chunk(x, t0, L);
    const Acc* H = Hs.data() + n * K * V;          // [K, V] start state
    const Acc* dHe = dh_end.data() + n * K * V;    // [K, V] gradient of the end state
    const std::vector<Acc> vn = new_values(c, H, K, V);  // [L, V]
    const Acc *q = x.q.data() + t0 * K, *k = x.k.data() + t0 * K, *v = x.v.data() + t0 * V;
    const Acc *beta = x.beta.data() + t0, *dO = do_ + t0 * V, *d2 = dv2.data() + t0 * V;
    Acc *dq = r.dq.data() + t0 * K, *dk = r.dk.data() + t0 * K, *dv = r.dv.data() + t0 * V;
    Acc *dbeta = r.dbeta.data() + t0;
    std::vector<Acc> dgam(static_cast<size_t>(L), Acc(0));  // [L] gradient w.r.t. gamma
    auto Gam = [&](int64_t i, int64_t j) { return std::exp(c.gam(i, 0) - c.gam(j, 0)); };
    const Acc gl = c.last(0);

    // Output / state part (step 3).
    std::vector<Acc> dw(static_cast<size_t>(L * K), Acc(0)), dP(static_cast<size_t>(L * L), Acc(0));
    std::vector<Acc> dki(static_cast<size_t>(L * K), Acc(0));
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t d = 0; d < K; ++d) {
        Acc hw = 0, hq = 0, hk = 0;
        for (int64_t e = 0; e < V; ++e) {
          hw += d2[i * V + e] * H[d * V + e];
          hq += dO[i * V + e] * H[d * V + e];
          hk += vn[i * V + e] * dHe[d * V + e];
        }
        dw[i * K + d] = -hw;                                     // dw = -dv2 H^T
        dq[i * K + d] = scale * std::exp(c.gam(i, 0)) * hq;      // scale diag(exp(gamma)) do H^T
        dki[i * K + d] = std::exp(gl - c.gam(i, 0)) * hk;        // diag(exp(gl - gamma)) v_new dH_end^T
      }
      for (int64_t j = 0; j <= i; ++j) {
        Acc s = 0;
        for (int64_t e = 0; e < V; ++e) s += dO[i * V + e] * vn[j * V + e];
        dP[i * L + j] = scale * s * Gam(i, j);
      }
    }
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t d = 0; d < K; ++d) {
          dq[i * K + d] += dP[i * L + j] * k[j * K + d];
          dk[j * K + d] += dP[i * L + j] * q[i * K + d];
        }
    for (int64_t i = 0; i < L * K; ++i) dk[i] += dki[i];
    Acc hdh = 0, dkik = 0;
    for (int64_t i = 0; i < K * V; ++i) hdh += H[i] * dHe[i];
    for (int64_t i = 0; i < L * K; ++i) dkik += dki[i] * k[i];
    for (int64_t r2 = 0; r2 < L; ++r2)
      for (int64_t d = 0; d < K; ++d) dgam[r2] += dq[r2 * K + d] * q[r2 * K + d] - dk[r2 * K + d] * k[r2 * K + d];
    dgam[L - 1] += std::exp(gl) * hdh + dkik;

    // WY part (step 4).
    for (int64_t j = 0; j < L; ++j) {
      const Acc eg = std::exp(c.gam(j, 0));
      for (int64_t d = 0; d < K; ++d) {
        Acc dkbg = 0;  // (T^T dw)_jd
        for (int64_t i = j; i < L; ++i) dkbg += c.Tm[i * L + j] * dw[i * K + d];
        dk[j * K + d] += beta[j] * eg * dkbg;
        dbeta[j] += dkbg * k[j * K + d] * eg;
        dgam[j] += dkbg * beta[j] * eg * k[j * K + d];
      }
      for (int64_t e = 0; e < V; ++e) {
        Acc dvb = 0;  // (T^T dv2)_je
        for (int64_t i = j; i < L; ++i) dvb += c.Tm[i * L + j] * d2[i * V + e];
        dv[j * V + e] = beta[j] * dvb;
        dbeta[j] += dvb * v[j * V + e];
      }
    }
    // dT = dw kbg^T + dv2 vb^T (strictly lower part), then dL = strict_lower(-T^T dT T^T).
    std::vector<Acc> dT(static_cast<size_t>(L * L), Acc(0)), tmp(static_cast<size_t>(L * L), Acc(0));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < i; ++j) {
        Acc s = 0;
        const Acc eg = std::exp(c.gam(j, 0)) * beta[j];
        for (int64_t d = 0; d < K; ++d) s += dw[i * K + d] * eg * k[j * K + d];
        for (int64_t e = 0; e < V; ++e) s += d2[i * V + e] * beta[j] * v[j * V + e];
        dT[i * L + j] = s;
      }
    for (int64_t a = 0; a < L; ++a)  // tmp = T^T dT
      for (int64_t i = a; i < L; ++i) {
        const Acc t = c.Tm[i * L + a];
        if (t == Acc(0)) continue;
        for (int64_t j = 0; j < i; ++j) tmp[a * L + j] += t * dT[i * L + j];
      }
    for (int64_t i = 0; i < L; ++i)  // dL = -tmp T^T, strictly lower
      for (int64_t j = 0; j < i; ++j) {
        Acc s = 0;
        for (int64_t b = 0; b <= j; ++b) s += tmp[i * L + b] * c.Tm[j * L + b];
        const Acc dL = -s;
        const Acc dA = dL * Gam(i, j);
        Acc kk = 0;
        for (int64_t d = 0; d < K; ++d) kk += k[i * K + d] * k[j * K + d];
        for (int64_t d = 0; d < K; ++d) {
          dk[i * K + d] += beta[i] * dA * k[j * K + d];
          dk[j * K + d] += dA * beta[i] * k[i * K + d];
        }
        dbeta[i] += dA * kk;
        const Acc dlL = dL * c.Lm[i * L + j];
        dgam[i] += dlL;
        dgam[j] -= dlL;
      }
    // dg_t = sum_{s >= t in the chunk} dgamma_s
    Acc run = 0;
    for (int64_t i = L - 1; i >= 0; --i) {
      run += dgam[i];
      r.dg[t0 + i] = run;
    }
  }
  return r;
}

template GdnHeadGrad<float> gdn_chunk_backward<float>(const GdnHead<float>&, float, const float*, const float*);
template GdnHeadGrad<double> gdn_chunk_backward<double>(const GdnHead<double>&, double, const double*, const double*);

}  // namespace attnkit::cpu
