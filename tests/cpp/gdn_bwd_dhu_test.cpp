// tests/cpp/gdn_bwd_dhu_test.cpp — the standalone reverse state-gradient op (bwd_dhu) on the CPU.
//
// Oracle: the forward state pass it differentiates, written here from spec/gdn.md's chunk
// equations with free inputs u and w:  per chunk, v_new = u - w H,
//   o_i = scale [ (q_i * e^{G_i}) H + sum_{j<=i} <q_i, k_j>_G v_new_j ],
//   H  <- diag(e^{G_last}) H + sum_j (k_j * e^{G_last - G_j}) v_new_j^T,
// and L = sum(o * do) + sum(H_T * dht). Given dv = dL/dv_new through the in-chunk path
// (scale * A^T do), the op must return dh0 = dL/dh0, dv2 = dL/du and dh[c] = dL/d(end state of
// chunk c); all three are checked by central finite differences of L.
#include "gdn_test_util.hpp"

namespace attnkit::test {
namespace {

struct DhuCase {
  int64_t B = 1, T = 150, H = 2, HV = 4, K = 8, V = 4;
  std::vector<int64_t> seqlens;
  bool gate = true, per_key = false;
  StateLayout layout = StateLayout::kKV;
  int64_t N() const { return seqlens.empty() ? B : static_cast<int64_t>(seqlens.size()); }
};

struct DhuData {
  HostTensor q, k, w, u, G, dout, h0, dht, cu;
};

// Sequence n's token range as (batch row, first token, length).
void seq_of(const DhuCase& c, int64_t n, int64_t& b, int64_t& t0, int64_t& len) {
  b = n, t0 = 0, len = c.T;
  if (c.seqlens.empty()) return;
  b = 0;
  for (int64_t i = 0; i < n; ++i) t0 += c.seqlens[i];
  len = c.seqlens[n];
}

int64_t sidx(const DhuCase& c, int64_t n, int64_t hv, int64_t kk, int64_t vv) {
  return c.layout == StateLayout::kKV ? ((n * c.HV + hv) * c.K + kk) * c.V + vv : ((n * c.HV + hv) * c.V + vv) * c.K + kk;
}

DhuData make(const DhuCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t G = c.per_key ? c.K : 1;
  DhuData d{HostTensor(DType::kFloat64, {c.B, c.T, c.H, c.K}), HostTensor(DType::kFloat64, {c.B, c.T, c.H, c.K}),
            HostTensor(DType::kFloat64, {c.B, c.T, c.HV, c.K}), HostTensor(DType::kFloat64, {c.B, c.T, c.HV, c.V}),
            HostTensor(DType::kFloat64, {c.B, c.T, c.HV, G}), HostTensor(DType::kFloat64, {c.B, c.T, c.HV, c.V}),
            HostTensor(DType::kFloat64, {c.N(), c.HV, c.layout == StateLayout::kKV ? c.K : c.V, c.layout == StateLayout::kKV ? c.V : c.K}),
            HostTensor(), HostTensor()};
  d.dht = d.h0;
  for (HostTensor* t : {&d.q, &d.k, &d.u, &d.dout, &d.h0, &d.dht}) t->randn(rng, 0.5);
  d.w.randn(rng, 0.2);
  // In-chunk cumulative gates: per-token log-decays in [-0.5, 0], summed from each chunk start.
  std::uniform_real_distribution<double> gd(-0.5, 0.0);
  for (int64_t n = 0; n < c.N(); ++n) {
    int64_t b, t0, len;
    seq_of(c, n, b, t0, len);
    for (int64_t hv = 0; hv < c.HV; ++hv)
      for (int64_t x = 0; x < G; ++x) {
        double run = 0;
        for (int64_t t = 0; t < len; ++t) {
          if (t % 64 == 0) run = 0;
          run += c.gate ? gd(rng) : 0.0;
          d.G.set(((b * c.T + t0 + t) * c.HV + hv) * G + x, run);
        }
      }
  }
  if (!c.seqlens.empty()) {
    std::vector<int64_t> cu = {0};
    for (int64_t l : c.seqlens) cu.push_back(cu.back() + l);
    d.cu = index_tensor(DType::kInt64, cu);
  }
  return d;
}

// The forward state pass. Returns L; with `dv_intra` also fills dL/dv_new through the in-chunk
// path. `bump` adds eps to one end-of-chunk state element: (n, hv, chunk, kk, vv).
struct Bump {
  int64_t n = -1, hv = 0, chunk = 0, kk = 0, vv = 0;
  double eps = 0;
};
double state_pass(const DhuCase& c, const DhuData& d, std::vector<double>* dv_intra, const Bump& bump = {}) {
  const int64_t K = c.K, V = c.V, G = c.per_key ? K : 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));
  if (dv_intra) dv_intra->assign(static_cast<size_t>(c.B * c.T * c.HV * V), 0.0);
  double L = 0;
  for (int64_t n = 0; n < c.N(); ++n) {
    int64_t b, t0, len;
    seq_of(c, n, b, t0, len);
    for (int64_t hv = 0; hv < c.HV; ++hv) {
      const int64_t h = hv / (c.HV / c.H);
      auto qv = [&](int64_t t, int64_t x) { return d.q.get(((b * c.T + t) * c.H + h) * K + x); };
      auto kv = [&](int64_t t, int64_t x) { return d.k.get(((b * c.T + t) * c.H + h) * K + x); };
      auto gv = [&](int64_t t, int64_t x) { return d.G.get(((b * c.T + t) * c.HV + hv) * G + (G == 1 ? 0 : x)); };
      auto tv = [&](int64_t t, int64_t x) { return ((b * c.T + t) * c.HV + hv) * V + x; };  // [.., V] index
      std::vector<double> Hs(static_cast<size_t>(K * V));
      for (int64_t a = 0; a < K; ++a)
        for (int64_t e = 0; e < V; ++e) Hs[a * V + e] = d.h0.get(sidx(c, n, hv, a, e));
      for (int64_t s = 0, ch = 0; s < len; s += 64, ++ch) {
        const int64_t c0 = t0 + s, c1 = t0 + std::min(len, s + 64);  // tokens [c0, c1)
        std::vector<double> vn(static_cast<size_t>((c1 - c0) * V));
        for (int64_t i = c0; i < c1; ++i)
          for (int64_t e = 0; e < V; ++e) {
            double x = d.u.get(tv(i, e));
            for (int64_t a = 0; a < K; ++a) x -= d.w.get(((b * c.T + i) * c.HV + hv) * K + a) * Hs[a * V + e];
            vn[(i - c0) * V + e] = x;
          }
        for (int64_t i = c0; i < c1; ++i)
          for (int64_t e = 0; e < V; ++e) {
            double o = 0;
            for (int64_t a = 0; a < K; ++a) o += qv(i, a) * std::exp(gv(i, a)) * Hs[a * V + e];
            for (int64_t j = c0; j <= i; ++j) {
              double A = 0;
              for (int64_t a = 0; a < K; ++a) A += qv(i, a) * kv(j, a) * std::exp(gv(i, a) - gv(j, a));
              o += A * vn[(j - c0) * V + e];
              if (dv_intra) (*dv_intra)[tv(j, e)] += scale * A * d.dout.get(tv(i, e));
            }
            L += scale * o * d.dout.get(tv(i, e));
          }
        const int64_t tl = c1 - 1;
        for (int64_t a = 0; a < K; ++a)
          for (int64_t e = 0; e < V; ++e) {
            double x = std::exp(gv(tl, a)) * Hs[a * V + e];
            for (int64_t j = c0; j < c1; ++j) x += kv(j, a) * std::exp(gv(tl, a) - gv(j, a)) * vn[(j - c0) * V + e];
            Hs[a * V + e] = x;
          }
        if (bump.n == n && bump.hv == hv && bump.chunk == ch) Hs[bump.kk * V + bump.vv] += bump.eps;
      }
      for (int64_t a = 0; a < K; ++a)
        for (int64_t e = 0; e < V; ++e) L += Hs[a * V + e] * d.dht.get(sidx(c, n, hv, a, e));
    }
  }
  return L;
}

void check(const DhuCase& c, uint32_t seed) {
  DhuData d = make(c, seed);
  std::vector<double> dv_intra;
  state_pass(c, d, &dv_intra);
  HostTensor dv(DType::kFloat64, {c.B, c.T, c.HV, c.V});
  for (size_t i = 0; i < dv_intra.size(); ++i) dv.set(static_cast<int64_t>(i), dv_intra[i]);
  std::vector<int64_t> chunk0 = {0};  // global chunk index of each sequence's first chunk
  for (int64_t n = 0; n < c.N(); ++n) {
    int64_t b, t0, len;
    seq_of(c, n, b, t0, len);
    chunk0.push_back(chunk0.back() + (len + 63) / 64);
  }
  const int64_t nt = c.seqlens.empty() ? (c.T + 63) / 64 : chunk0.back();
  const bool kvl = c.layout == StateLayout::kKV;
  HostTensor dh(DType::kFloat64, {c.B, nt, c.HV, kvl ? c.K : c.V, kvl ? c.V : c.K}), dh0 = d.h0, dv2 = dv;
  dh.fill(std::nan(""));
  dh0.fill(std::nan(""));
  dv2.fill(std::nan(""));
  // With the per-key gate the op takes q and k already gated (FLA's convention, attnkit/gdn.hpp):
  // q * e^G and k * e^(G_last - G), G_last the gate of the token's chunk's last token.
  HostTensor qg = d.q, kg = d.k;
  if (c.gate && c.per_key) {
    EXPECT_EQ(c.H, c.HV);
    for (int64_t n = 0; n < c.N(); ++n) {
      int64_t b, t0, len;
      seq_of(c, n, b, t0, len);
      for (int64_t t = 0; t < len; ++t) {
        const int64_t last = std::min(len, (t / 64 + 1) * 64) - 1;
        for (int64_t h = 0; h < c.H; ++h)
          for (int64_t x = 0; x < c.K; ++x) {
            const int64_t hv = h;  // pre-gated q / k need a gate per q/k head: H == HV (as FLA's KDA)
            const double G = d.G.get(((b * c.T + t0 + t) * c.HV + hv) * c.K + x);
            const double Gl = d.G.get(((b * c.T + t0 + last) * c.HV + hv) * c.K + x);
            const int64_t i = ((b * c.T + t0 + t) * c.H + h) * c.K + x;
            qg.set(i, d.q.get(i) * std::exp(G));
            kg.set(i, d.k.get(i) * std::exp(Gl - G));
          }
      }
    }
  }
  GdnBwdDhuParams p;
  p.q = qg.view;
  p.k = kg.view;
  p.w = d.w.view;
  p.dout = d.dout.view;
  p.dv = dv.view;
  TensorView G = d.G.view;
  if (c.gate && !c.per_key) G.ndim = 3;  // [B, T, HV, 1] seen as [B, T, HV]
  if (c.gate) (c.per_key ? p.gk : p.g) = G;
  p.dht = d.dht.view;
  if (d.cu.view.defined()) p.cu_seqlens = d.cu.view;
  p.state_layout = c.layout;
  p.dh = dh.view;
  p.dh0 = dh0.view;
  p.dv2 = dv2.view;
  ASSERT_OK(gdn_bwd_dhu(p));
  ASSERT_TRUE(all_finite(dh.values()) && all_finite(dh0.values()) && all_finite(dv2.values()));
  const double h = 1e-6;
  auto fd = [&](HostTensor& x, int64_t i) { return central_difference(x, i, [&] { return state_pass(c, d, nullptr); }, h); };
  std::mt19937 rng(seed + 1);
  for (int s = 0; s < 6; ++s) {
    const int64_t i = std::uniform_int_distribution<int64_t>(0, d.h0.numel() - 1)(rng);
    const double want = fd(d.h0, i);
    EXPECT_NEAR(dh0.get(i), want, 1e-6 * (1 + std::abs(want))) << "dh0 " << i;
    const int64_t j = std::uniform_int_distribution<int64_t>(0, d.u.numel() - 1)(rng);
    const double want_u = fd(d.u, j);
    EXPECT_NEAR(dv2.get(j), want_u, 1e-6 * (1 + std::abs(want_u))) << "dv2 " << j;
  }
  // dh of every chunk of sequence 0 (and the last sequence), for one head and element.
  for (int64_t n : {int64_t(0), c.N() - 1}) {
    int64_t b, t0, len;
    seq_of(c, n, b, t0, len);
    for (int64_t ch = 0; ch < (len + 63) / 64; ++ch) {
      Bump bp{n, 1, ch, 2, 3, h};
      const double lp = state_pass(c, d, nullptr, bp);
      bp.eps = -h;
      const double lm = state_pass(c, d, nullptr, bp);
      const double want = (lp - lm) / (2 * h);
      const int64_t gch = (c.seqlens.empty() ? 0 : chunk0[n]) + ch;
      const int64_t off = kvl ? (((b * nt + gch) * c.HV + 1) * c.K + 2) * c.V + 3 : (((b * nt + gch) * c.HV + 1) * c.V + 3) * c.K + 2;
      EXPECT_NEAR(dh.get(off), want, 1e-6 * (1 + std::abs(want))) << "dh seq " << n << " chunk " << ch;
    }
  }
}

TEST(GdnBwdDhu, ScalarGateGvaMatchesFiniteDifferences) { check(DhuCase{}, 1); }

TEST(GdnBwdDhu, PerKeyGate) {
  DhuCase c;
  c.per_key = true;
  c.H = c.HV;  // q and k come gated per value head
  check(c, 2);
}

TEST(GdnBwdDhu, NoGateVFirstLayout) {
  DhuCase c;
  c.gate = false;
  c.layout = StateLayout::kVK;
  c.T = 70;
  check(c, 3);
}

TEST(GdnBwdDhu, VarlenChunksNumberedBySequence) {
  DhuCase c;
  c.seqlens = {1, 0, 130, 64, 5};
  c.T = 200;
  check(c, 4);
}

// gates_log2: base-2 gates (FLA's convention) give what the natural-log gates they encode give.
TEST(GdnBwdDhu, GatesInLog2Units) {
  for (bool per_key : {false, true}) {
    SCOPED_TRACE(per_key ? "gk" : "g");
    DhuCase c;
    c.per_key = per_key;
    c.H = per_key ? c.HV : c.H;
    const DhuData d = make(c, 5);
    HostTensor G2 = d.G;
    for (int64_t i = 0; i < G2.numel(); ++i) G2.set(i, d.G.get(i) / std::log(2.0));
    auto run = [&](const HostTensor& G, bool log2) {
      std::vector<HostTensor> out = {HostTensor(DType::kFloat64, {c.B, (c.T + 63) / 64, c.HV, c.K, c.V}), d.h0,
                                     HostTensor(DType::kFloat64, {c.B, c.T, c.HV, c.V})};
      GdnBwdDhuParams p;
      p.q = d.q.view;
      p.k = d.k.view;
      p.w = d.w.view;
      p.dout = d.dout.view;
      p.dv = d.u.view;  // any dv: both runs get the same
      TensorView g = G.view;
      if (!per_key) g.ndim = 3;  // [B, T, HV, 1] seen as [B, T, HV]
      (per_key ? p.gk : p.g) = g;
      p.gates_log2 = log2;
      p.dht = d.dht.view;
      p.dh = out[0].view;
      p.dh0 = out[1].view;
      p.dv2 = out[2].view;
      EXPECT_TRUE(gdn_bwd_dhu(p).ok());
      return out;
    };
    const auto want = run(d.G, false), got = run(G2, true);
    for (size_t t = 0; t < want.size(); ++t) {
      const auto a = got[t].values(), b = want[t].values();
      ASSERT_TRUE(all_finite(a));
      EXPECT_LT(rel_rms(a, b), 1e-12) << "output " << t;
    }
    // And the flag is read: the base-2 values taken as natural logs give something else.
    EXPECT_GT(rel_rms(run(G2, false)[0].values(), want[0].values()), 1e-3);
  }
}

// num_segments: 0, 1 or a count (the CPU ignores the split); a negative one is refused on any
// backend, naming the argument.
TEST(GdnBwdDhu, NegativeSegmentCountRefused) {
  DhuCase c;
  c.gate = false;
  const DhuData d = make(c, 6);
  HostTensor dh(DType::kFloat64, {c.B, (c.T + 63) / 64, c.HV, c.K, c.V}), dv2(DType::kFloat64, {c.B, c.T, c.HV, c.V});
  GdnBwdDhuParams p;
  p.q = d.q.view;
  p.k = d.k.view;
  p.w = d.w.view;
  p.dout = d.dout.view;
  p.dv = d.u.view;
  p.dh = dh.view;
  p.dv2 = dv2.view;
  p.num_segments = 4;
  ASSERT_OK(gdn_bwd_dhu(p));
  p.num_segments = -1;
  const Status st = gdn_bwd_dhu(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("num_segments"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace attnkit::test
