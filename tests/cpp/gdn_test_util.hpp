// tests/cpp/gdn_test_util.hpp — GDN test cases, their tensors, and an independent float64 oracle
// (the token recurrence of spec/gdn.md, with the in-op options applied by hand).
#pragma once
#include <numeric>
#include <optional>

#include "test_util.hpp"

namespace attnkit::test {

struct GdnCase {
  int64_t B = 1, T = 70, H = 2, HV = 2, K = 8, V = 8;
  std::vector<int64_t> seqlens;  // non-empty => varlen (B must be 1, T = sum)
  bool scalar_gate = true, per_key_gate = false, fused_gate = false;
  bool l2norm = false, beta_logit = false, h0 = true;
  bool final_state = true;  // false: no ht tensor (and no reference state) at all
  double g_lo = -1.0, g_hi = 0.0;  // gate range per token
  StateLayout layout = StateLayout::kKV;
  DType dt = DType::kFloat64;
  std::optional<DType> beta_dt;  // beta's dtype where not dt's
  GdnAlgorithm algo = GdnAlgorithm::kChunked;
  int64_t N() const { return seqlens.empty() ? B : static_cast<int64_t>(seqlens.size()); }
};

struct GdnData {
  HostTensor q, k, v, g, gk, beta, A_log, dt_bias, h0, out, ht, cu;
};

// Gates, states and fused-gate params: fp64 in fp64 cases, fp32 otherwise (as FLA prefers).
inline DType fp32_or_64(const GdnCase& c) { return c.dt == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

inline std::vector<int64_t> state_shape(const GdnCase& c) {
  return c.layout == StateLayout::kKV ? std::vector<int64_t>{c.N(), c.HV, c.K, c.V}
                                      : std::vector<int64_t>{c.N(), c.HV, c.V, c.K};
}

inline GdnData make_gdn(const GdnCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  GdnData d;
  d.q = HostTensor(c.dt, {c.B, c.T, c.H, c.K});
  d.k = HostTensor(c.dt, {c.B, c.T, c.H, c.K});
  d.v = HostTensor(c.dt, {c.B, c.T, c.HV, c.V});
  d.q.randn(rng);
  d.k.randn(rng);
  d.v.randn(rng);
  if (!c.l2norm) {  // the op's inverse is well conditioned for unit keys (spec/gdn.md)
    for (int64_t r = 0; r < c.B * c.T * c.H; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < c.K; ++i) ss += d.k.get(r * c.K + i) * d.k.get(r * c.K + i);
      for (int64_t i = 0; i < c.K; ++i) d.k.set(r * c.K + i, d.k.get(r * c.K + i) / std::sqrt(ss + 1e-6));
    }
  }
  d.beta = HostTensor(c.beta_dt.value_or(c.dt), {c.B, c.T, c.HV});
  if (c.beta_logit) d.beta.randn(rng);
  else d.beta.uniform(rng, 0.05, 1.0);
  if (c.per_key_gate) {
    d.gk = HostTensor(fp32_or_64(c), {c.B, c.T, c.HV, c.K});
    d.gk.uniform(rng, c.g_lo, c.g_hi);
  } else if (c.scalar_gate) {
    d.g = HostTensor(fp32_or_64(c), {c.B, c.T, c.HV});
    if (c.fused_gate) d.g.randn(rng);
    else d.g.uniform(rng, c.g_lo, c.g_hi);
  }
  if (c.fused_gate) {
    d.A_log = HostTensor(fp32_or_64(c), {c.HV});
    d.dt_bias = HostTensor(d.A_log.view.dtype, {c.HV});
    d.A_log.uniform(rng, -1.5, 0.5);
    d.dt_bias.randn(rng, 0.5);
  }
  if (c.h0) {
    d.h0 = HostTensor(fp32_or_64(c), state_shape(c));
    d.h0.randn(rng, 0.5);
  }
  d.out = HostTensor(c.dt, {c.B, c.T, c.HV, c.V});
  d.out.fill(std::nan(""));
  if (c.final_state) {
    d.ht = HostTensor(fp32_or_64(c), state_shape(c));
    d.ht.fill(std::nan(""));
  }
  if (!c.seqlens.empty()) {
    std::vector<int64_t> cu = {0};
    for (int64_t l : c.seqlens) cu.push_back(cu.back() + l);
    d.cu = index_tensor(DType::kInt64, cu);
  }
  return d;
}

inline GdnInputs gdn_inputs(const GdnCase& c, const GdnData& d) {
  GdnInputs in;
  in.q = d.q.view;
  in.k = d.k.view;
  in.v = d.v.view;
  in.beta = d.beta.view;
  if (d.g.view.defined()) in.g = d.g.view;
  if (d.gk.view.defined()) in.gk = d.gk.view;
  if (d.A_log.view.defined()) {
    in.A_log = d.A_log.view;
    in.dt_bias = d.dt_bias.view;
  }
  if (d.h0.view.defined()) in.initial_state = d.h0.view;
  if (d.cu.view.defined()) in.cu_seqlens = d.cu.view;
  in.state_layout = c.layout;
  in.use_qk_l2norm = c.l2norm;
  in.beta_is_logit = c.beta_logit;
  in.algorithm = c.algo;
  return in;
}

inline Status run_gdn_forward(const GdnCase& c, GdnData& d) {
  GdnFwdParams p;
  p.in = gdn_inputs(c, d);
  p.out = d.out.view;
  p.final_state = d.ht.view;
  return gdn_forward(p);
}

// Flat logical index of state element (n, hv, kk, vv) in the case's layout.
inline int64_t state_index(const GdnCase& c, int64_t n, int64_t hv, int64_t kk, int64_t vv) {
  return c.layout == StateLayout::kKV ? ((n * c.HV + hv) * c.K + kk) * c.V + vv : ((n * c.HV + hv) * c.V + vv) * c.K + kk;
}

// The float64 token recurrence. o: logical [B, T, HV, V]; ht: logical like d.ht.
inline void gdn_oracle(const GdnCase& c, const GdnData& d, std::vector<double>& o, std::vector<double>& ht) {
  const auto q = d.q.values(), k = d.k.values(), v = d.v.values(), beta = d.beta.values();
  const auto g = d.g.view.defined() ? d.g.values() : std::vector<double>();
  const auto gk = d.gk.view.defined() ? d.gk.values() : std::vector<double>();
  const auto h0 = d.h0.view.defined() ? d.h0.values() : std::vector<double>();
  o.assign(static_cast<size_t>(c.B * c.T * c.HV * c.V), 0.0);
  ht.assign(c.final_state ? static_cast<size_t>(c.N() * c.HV * c.K * c.V) : 0, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.K));
  for (int64_t n = 0; n < c.N(); ++n)
    for (int64_t hv = 0; hv < c.HV; ++hv) {
      const int64_t h = hv / (c.HV / c.H);
      int64_t b = n, t0 = 0, len = c.T;
      if (!c.seqlens.empty()) {
        b = 0;
        t0 = std::accumulate(c.seqlens.begin(), c.seqlens.begin() + n, int64_t(0));
        len = c.seqlens[n];
      }
      std::vector<double> S(static_cast<size_t>(c.K * c.V), 0.0);  // [K, V]
      if (c.h0)
        for (int64_t a = 0; a < c.K; ++a)
          for (int64_t e = 0; e < c.V; ++e) S[a * c.V + e] = h0[state_index(c, n, hv, a, e)];
      for (int64_t t = t0; t < t0 + len; ++t) {
        const int64_t rq = ((b * c.T + t) * c.H + h) * c.K, rv = ((b * c.T + t) * c.HV + hv) * c.V;
        const int64_t rg = (b * c.T + t) * c.HV + hv;
        std::vector<double> qt(q.begin() + rq, q.begin() + rq + c.K), kt(k.begin() + rq, k.begin() + rq + c.K);
        if (c.l2norm)
          for (auto* x : {&qt, &kt}) {
            double ss = 0;
            for (double y : *x) ss += y * y;
            for (double& y : *x) y /= std::sqrt(ss + 1e-6);
          }
        double bt = beta[rg];
        if (c.beta_logit) bt = 1 / (1 + std::exp(-bt));
        for (int64_t a = 0; a < c.K; ++a) {
          double gt = 0;
          if (c.per_key_gate) gt = gk[rg * c.K + a];
          else if (c.scalar_gate) {
            gt = g[rg];
            if (c.fused_gate) {
              const double x = gt + d.dt_bias.get(hv);
              gt = -std::exp(d.A_log.get(hv)) * (x > 20 ? x : std::log1p(std::exp(x)));
            }
          }
          for (int64_t e = 0; e < c.V; ++e) S[a * c.V + e] *= std::exp(gt);
        }
        std::vector<double> u(static_cast<size_t>(c.V));
        for (int64_t e = 0; e < c.V; ++e) {
          double p = 0;
          for (int64_t a = 0; a < c.K; ++a) p += S[a * c.V + e] * kt[a];
          u[e] = bt * (v[rv + e] - p);
        }
        for (int64_t a = 0; a < c.K; ++a)
          for (int64_t e = 0; e < c.V; ++e) S[a * c.V + e] += kt[a] * u[e];
        for (int64_t e = 0; e < c.V; ++e) {
          double s = 0;
          for (int64_t a = 0; a < c.K; ++a) s += S[a * c.V + e] * scale * qt[a];
          o[rv + e] = s;
        }
      }
      if (c.final_state)
        for (int64_t a = 0; a < c.K; ++a)
          for (int64_t e = 0; e < c.V; ++e) ht[state_index(c, n, hv, a, e)] = S[a * c.V + e];
    }
}

// The GPU suites' base case: B = 2, H = 2 query/key heads, HV = 4 value heads, K = V = D.
inline GdnCase head_case(DType dt, int64_t D, int64_t T) {
  GdnCase c;
  c.dt = dt;
  c.B = 2;
  c.T = T;
  c.H = 2;
  c.HV = 4;
  c.K = c.V = D;
  return c;
}

// ---- backward helpers (gradients of the loss sum(o * W) + sum(ht * W2)) ----

struct GdnGrads {
  HostTensor dq, dk, dv, dbeta, dg, dh0, dA_log, ddt_bias;
};

// The cotangents of the loss sum(o * W) + sum(ht * W2).
struct Cotangents {
  HostTensor W, W2;
};

inline Cotangents make_cotangents(const GdnCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Cotangents ct{HostTensor(c.dt, {c.B, c.T, c.HV, c.V}), HostTensor(fp32_or_64(c), state_shape(c))};
  ct.W.randn(rng);
  ct.W2.randn(rng);
  return ct;
}

// NaN-filled gradients shaped like d's inputs, and the backward's params over d, ct and g.
inline GdnGrads make_grads(const GdnData& d) {
  auto like = [](const HostTensor& t) {
    HostTensor r(t.view.dtype, std::vector<int64_t>(t.view.sizes, t.view.sizes + t.view.ndim));
    r.fill(std::nan(""));
    return r;
  };
  GdnGrads g;
  g.dq = like(d.q);
  g.dk = like(d.k);
  g.dv = like(d.v);
  g.dbeta = like(d.beta);
  if (d.g.view.defined()) g.dg = like(d.g);
  if (d.gk.view.defined()) g.dg = like(d.gk);
  if (d.h0.view.defined()) g.dh0 = like(d.h0);
  if (d.A_log.view.defined()) {
    g.dA_log = like(d.A_log);
    g.ddt_bias = like(d.dt_bias);
  }
  return g;
}

inline GdnBwdParams gdn_bwd_params(const GdnCase& c, const GdnData& d, const Cotangents& ct, const GdnGrads& g) {
  GdnBwdParams p;
  p.in = gdn_inputs(c, d);
  p.dout = ct.W.view;
  p.dfinal_state = ct.W2.view;
  p.dq = g.dq.view;
  p.dk = g.dk.view;
  p.dv = g.dv.view;
  p.dbeta = g.dbeta.view;
  if (g.dg.view.defined()) p.dg = g.dg.view;
  if (g.dh0.view.defined()) p.dinitial_state = g.dh0.view;
  if (g.dA_log.view.defined()) {
    p.dA_log = g.dA_log.view;
    p.ddt_bias = g.ddt_bias.view;
  }
  return p;
}

// The CPU backward of d under the cotangents ct.
inline GdnGrads run_backward(const GdnCase& c, const GdnData& d, const Cotangents& ct) {
  GdnGrads g = make_grads(d);
  const Status st = gdn_backward(gdn_bwd_params(c, d, ct, g));
  EXPECT_TRUE(st.ok()) << st.message();
  return g;
}

// The float64 twin of case c's data d: the same shapes, exactly d's (rounded) values.
inline GdnData float64_twin(const GdnCase& c, const GdnData& d, GdnCase& c64) {
  c64 = c;
  c64.dt = DType::kFloat64;
  GdnData d64 = make_gdn(c64, 0);
  for (auto [s, t] : {std::pair{&d.q, &d64.q}, std::pair{&d.k, &d64.k}, std::pair{&d.v, &d64.v}, std::pair{&d.beta, &d64.beta},
                      std::pair{&d.g, &d64.g}, std::pair{&d.gk, &d64.gk}, std::pair{&d.h0, &d64.h0},
                      std::pair{&d.A_log, &d64.A_log}, std::pair{&d.dt_bias, &d64.dt_bias}})
    if (s->view.defined())
      for (int64_t i = 0; i < s->numel(); ++i) t->set(i, s->get(i));
  return d64;
}

}  // namespace attnkit::test
