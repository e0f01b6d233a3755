// tests/cpp/attention_test.cpp — the CPU softmax attention against a naive float64 full-matrix
// softmax written from spec/attention.md, gradients against finite differences, varlen against
// per-sequence dense, GQA against repeated heads, and both dK/dV reduction strategies.
#include <limits>

#include "test_util.hpp"

namespace attnkit::test {
namespace {

struct Case {
  int64_t B = 1, Sq = 17, Sk = 17, Hq = 2, Hkv = 2, D = 8, Dv = 8;
  MaskOptions mask;
  double softcap = 0;
  DType dt = DType::kFloat64;
};

// Spec, step 3: the aligned diagonal, causal and window bounds.
bool spec_visible(const Case& c, int64_t sq, int64_t sk, int64_t i, int64_t j) {
  const int64_t d = i + (c.mask.align == CausalAlign::kBottomRight ? sk - sq : 0);
  if (c.mask.causal && j > d) return false;
  if (c.mask.window_left >= 0 && j < d - c.mask.window_left) return false;
  if (c.mask.window_right >= 0 && j > d + c.mask.window_right) return false;
  return true;
}

struct Tensors {
  HostTensor q, k, v, out, lse;
};

Tensors make(const Case& c, uint32_t seed, std::vector<int> perm = {}) {
  std::mt19937 rng(seed);
  Tensors t;
  t.q = HostTensor(c.dt, {c.B, c.Sq, c.Hq, c.D}, perm);
  t.k = HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.D}, perm);
  t.v = HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.Dv}, perm);
  t.q.randn(rng);
  t.k.randn(rng);
  t.v.randn(rng);
  t.out = HostTensor(c.dt, {c.B, c.Sq, c.Hq, c.Dv});
  t.out.fill(std::nan(""));  // poisoned: every element must be written
  t.lse = HostTensor(DType::kFloat32, {c.B, c.Hq, c.Sq});
  t.lse.fill(std::nan(""));
  return t;
}

// Naive float64 reference: the full score matrix of every (b, h).
void naive_forward(const Case& c, const Tensors& t, std::vector<double>& out, std::vector<double>& lse) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  auto q = t.q.values(), k = t.k.values(), v = t.v.values();
  out.assign(static_cast<size_t>(c.B * c.Sq * c.Hq * c.Dv), 0.0);
  lse.assign(static_cast<size_t>(c.B * c.Hq * c.Sq), 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t hk = h / (c.Hq / c.Hkv);
      for (int64_t i = 0; i < c.Sq; ++i) {
        std::vector<double> s(static_cast<size_t>(c.Sk), -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < c.Sk; ++j) {
          if (!spec_visible(c, c.Sq, c.Sk, i, j)) continue;
          double x = 0;
          for (int64_t d = 0; d < c.D; ++d) x += q[((b * c.Sq + i) * c.Hq + h) * c.D + d] * k[((b * c.Sk + j) * c.Hkv + hk) * c.D + d];
          x *= scale;
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          s[j] = x;
          m = std::max(m, x);
        }
        double l = 0;
        for (int64_t j = 0; j < c.Sk; ++j) l += std::isinf(s[j]) ? 0.0 : std::exp(s[j] - m);
        double* o = &out[((b * c.Sq + i) * c.Hq + h) * c.Dv];
        lse[(b * c.Hq + h) * c.Sq + i] = l == 0 ? -std::numeric_limits<double>::infinity() : m + std::log(l);
        if (l == 0) continue;
        for (int64_t j = 0; j < c.Sk; ++j) {
          if (std::isinf(s[j])) continue;
          const double p = std::exp(s[j] - m) / l;
          for (int64_t e = 0; e < c.Dv; ++e) o[e] += p * v[((b * c.Sk + j) * c.Hkv + hk) * c.Dv + e];
        }
      }
    }
}

AttentionFwdParams fwd_params(const Case& c, Tensors& t) {
  AttentionFwdParams p;
  p.q = t.q.view;
  p.k = t.k.view;
  p.v = t.v.view;
  p.out = t.out.view;
  p.lse = t.lse.view;
  p.mask = c.mask;
  p.softcap = c.softcap;
  return p;
}

std::vector<Case> option_sweep() {
  std::vector<Case> cases;
  const int64_t lens[][2] = {{1, 1}, {17, 17}, {63, 65}, {65, 63}, {127, 40}, {40, 130}};
  for (auto& l : lens)
    for (int variant = 0; variant < 6; ++variant) {
      Case c;
      c.Sq = l[0];
      c.Sk = l[1];
      c.Hq = 3;
      c.Hkv = variant % 2 ? 1 : 3;
      if (variant == 1) c.mask.causal = true;
      if (variant == 2) { c.mask.causal = true; c.mask.align = CausalAlign::kTopLeft; }
      if (variant == 3) { c.mask.window_left = 9; c.mask.window_right = 4; }
      if (variant == 4) { c.mask.causal = true; c.mask.window_left = 20; c.softcap = 2.0; }
      if (variant == 5) { c.mask.window_left = 0; c.mask.window_right = -1; c.mask.align = CausalAlign::kTopLeft; }
      cases.push_back(c);
    }
  return cases;
}

void expect_matches_naive(const Case& c, const Tensors& t, double tol) {
  std::vector<double> ref_out, ref_lse;
  naive_forward(c, t, ref_out, ref_lse);
  auto out = t.out.values(), lse = t.lse.values();
  ASSERT_TRUE(all_finite(out));
  EXPECT_LE(max_abs_diff(out, ref_out), tol);
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(ref_lse[i])) EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "row " << i;
    else EXPECT_NEAR(lse[i], ref_lse[i], 1e-5 * (1 + std::abs(ref_lse[i])));
  }
}

TEST(AttentionForward, MatchesNaiveFloat64AcrossOptions) {
  for (const Case& c : option_sweep()) {
    SCOPED_TRACE("Sq=" + std::to_string(c.Sq) + " Sk=" + std::to_string(c.Sk) + " Hkv=" + std::to_string(c.Hkv) +
                 " causal=" + std::to_string(c.mask.causal) + " wl=" + std::to_string(c.mask.window_left));
    Tensors t = make(c, 1);
    ASSERT_OK(attention_forward(fwd_params(c, t)));
    expect_matches_naive(c, t, 1e-12);
  }
}

TEST(AttentionForward, LowPrecisionInputsAndStridedLayouts) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    Case c;
    c.B = 2;
    c.Sq = 65;
    c.Sk = 130;
    c.Hq = 4;
    c.Hkv = 2;
    c.D = 16;
    c.Dv = 16;
    c.mask.causal = true;
    c.dt = dt;
    Tensors t = make(c, 2, {0, 2, 1, 3});  // BHSD memory seen as BSHD: non-contiguous strides
    ASSERT_FALSE(t.q.view.is_contiguous());
    ASSERT_OK(attention_forward(fwd_params(c, t)));
    // The reference sees the same rounded inputs; the error left is fp32 math + output rounding.
    expect_matches_naive(c, t, dt == DType::kFloat32 ? 1e-5 : (dt == DType::kBFloat16 ? 2e-2 : 3e-3));
  }
}

TEST(AttentionForward, RowsWithNoVisibleKeyGiveZeroAndMinusInf) {
  Case c;
  c.Sq = 20;
  c.Sk = 5;  // bottom-right causal: queries 0..14 see no key
  c.mask.causal = true;
  Tensors t = make(c, 3);
  ASSERT_OK(attention_forward(fwd_params(c, t)));
  auto out = t.out.values(), lse = t.lse.values();
  ASSERT_TRUE(all_finite(out));
  for (int64_t i = 0; i < 15; ++i)
    for (int64_t e = 0; e < c.Dv; ++e) EXPECT_EQ(out[(i * c.Hq) * c.Dv + e], 0.0);
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] < 0);
  EXPECT_TRUE(std::isfinite(lse[15]));
  expect_matches_naive(c, t, 1e-12);
}

TEST(AttentionForward, GqaEqualsRepeatedHeads) {
  Case c;
  c.Sq = 33;
  c.Sk = 47;
  c.Hq = 8;
  c.Hkv = 2;
  c.mask.causal = true;
  Tensors t = make(c, 4);
  ASSERT_OK(attention_forward(fwd_params(c, t)));
  Case r = c;
  r.Hkv = 8;
  Tensors tr = make(r, 4);
  tr.q = t.q;
  for (int64_t j = 0; j < c.Sk; ++j)
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t d = 0; d < c.D; ++d) {
        tr.k.set((j * 8 + h) * c.D + d, t.k.get((j * 2 + h / 4) * c.D + d));
        tr.v.set((j * 8 + h) * c.Dv + d, t.v.get((j * 2 + h / 4) * c.Dv + d));
      }
  ASSERT_OK(attention_forward(fwd_params(r, tr)));
  EXPECT_EQ(max_abs_diff(t.out.values(), tr.out.values()), 0.0);
}

// ---- backward ----

struct Grads {
  HostTensor dq, dk, dv;
};

// The backward's params on the forward's tensors, dout and the gradients' tensors g.
AttentionBwdParams bwd_params(const Case& c, Tensors& t, const HostTensor& dout, Grads& g) {
  AttentionBwdParams p;
  p.q = t.q.view;
  p.k = t.k.view;
  p.v = t.v.view;
  p.out = t.out.view;
  p.lse = t.lse.view;
  p.dout = dout.view;
  p.dq = g.dq.view;
  p.dk = g.dk.view;
  p.dv = g.dv.view;
  p.mask = c.mask;
  p.softcap = c.softcap;
  return p;
}

Grads run_backward(const Case& c, Tensors& t, const HostTensor& dout, GqaReduction red, bool det) {
  Grads g{HostTensor(c.dt, {c.B, c.Sq, c.Hq, c.D}), HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.D}),
          HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.Dv})};
  g.dq.fill(std::nan(""));
  g.dk.fill(std::nan(""));
  g.dv.fill(std::nan(""));
  AttentionBwdParams p = bwd_params(c, t, dout, g);
  p.gqa_reduction = red;
  p.deterministic = det;
  Status st = attention_backward(p);
  EXPECT_TRUE(st.ok()) << st.message();
  return g;
}

// loss = sum(out * W): central differences on sampled elements of q, k, v.
TEST(AttentionBackward, MatchesFiniteDifferencesAcrossOptions) {
  int n_case = 0;
  for (Case c : option_sweep()) {
    if (c.Sq > 70 || c.Sk > 70) continue;  // keep the FD loop quick
    SCOPED_TRACE("case " + std::to_string(n_case++));
    Tensors t = make(c, 5);
    ASSERT_OK(attention_forward(fwd_params(c, t)));
    std::mt19937 rng(6);
    HostTensor W(c.dt, {c.B, c.Sq, c.Hq, c.Dv});
    W.randn(rng);
    Grads g = run_backward(c, t, W, GqaReduction::kAtomic, false);
    ASSERT_TRUE(all_finite(g.dq.values()) && all_finite(g.dk.values()) && all_finite(g.dv.values()));
    auto loss = [&]() {
      Tensors u = t;
      EXPECT_TRUE(attention_forward(fwd_params(c, u)).ok());
      auto o = u.out.values(), w = W.values();
      double s = 0;
      for (size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
      return s;
    };
    for (auto [x, gx] : {std::pair{&t.q, &g.dq}, std::pair{&t.k, &g.dk}, std::pair{&t.v, &g.dv}}) {
      std::uniform_int_distribution<int64_t> pick(0, x->numel() - 1);
      for (int s = 0; s < 8; ++s) {
        const int64_t i = pick(rng);
        const double fd = central_difference(*x, i, loss);
        EXPECT_NEAR(gx->get(i), fd, 1e-6 * (1 + std::abs(fd))) << "element " << i;
      }
    }
  }
}

TEST(AttentionBackward, EmptyRowsGiveZeroGradients) {
  Case c;
  c.Sq = 20;
  c.Sk = 5;
  c.mask.causal = true;
  Tensors t = make(c, 7);
  ASSERT_OK(attention_forward(fwd_params(c, t)));
  std::mt19937 rng(8);
  HostTensor W(c.dt, {c.B, c.Sq, c.Hq, c.Dv});
  W.randn(rng);
  Grads g = run_backward(c, t, W, GqaReduction::kSplit, false);
  auto dq = g.dq.values();
  ASSERT_TRUE(all_finite(dq) && all_finite(g.dk.values()));
  for (int64_t i = 0; i < 15 * c.Hq * c.D; ++i) EXPECT_EQ(dq[i], 0.0);
}

TEST(AttentionBackward, AtomicAndSplitAgreeAndDeterministicIsBitwise) {
  Case c;
  c.B = 2;
  c.Sq = 70;
  c.Sk = 90;
  c.Hq = 8;
  c.Hkv = 2;
  c.D = 16;
  c.Dv = 16;
  c.mask.causal = true;
  c.dt = DType::kFloat32;
  Tensors t = make(c, 9);
  ASSERT_OK(attention_forward(fwd_params(c, t)));
  std::mt19937 rng(10);
  HostTensor W(c.dt, {c.B, c.Sq, c.Hq, c.Dv});
  W.randn(rng);
  Grads a = run_backward(c, t, W, GqaReduction::kAtomic, false);
  Grads s = run_backward(c, t, W, GqaReduction::kSplit, false);
  EXPECT_LE(max_abs_diff(a.dk.values(), s.dk.values()), 1e-4);
  EXPECT_LE(max_abs_diff(a.dv.values(), s.dv.values()), 1e-4);
  EXPECT_EQ(max_abs_diff(a.dq.values(), s.dq.values()), 0.0);
  // kPacked sums the group in head order, as kSplit does: the same bits; kAuto agrees.
  Grads packed = run_backward(c, t, W, GqaReduction::kPacked, false);
  EXPECT_EQ(packed.dk.buf, s.dk.buf);
  EXPECT_EQ(packed.dv.buf, s.dv.buf);
  Grads automatic = run_backward(c, t, W, GqaReduction::kAuto, false);
  EXPECT_LE(max_abs_diff(automatic.dk.values(), s.dk.values()), 1e-4);
  Grads first = run_backward(c, t, W, GqaReduction::kAtomic, true);
  for (int run = 0; run < 10; ++run) {
    Grads again = run_backward(c, t, W, GqaReduction::kAtomic, true);
    EXPECT_EQ(first.dk.buf, again.dk.buf);
    EXPECT_EQ(first.dv.buf, again.dv.buf);
    EXPECT_EQ(first.dq.buf, again.dq.buf);
  }
}

TEST(AttentionBackward, UnknownGqaReductionIsAClearError) {
  Case c;
  c.Sq = c.Sk = 8;
  c.Hq = 4;
  c.Hkv = 2;
  c.dt = DType::kFloat32;
  Tensors t = make(c, 3);
  ASSERT_OK(attention_forward(fwd_params(c, t)));
  HostTensor W(c.dt, {c.B, c.Sq, c.Hq, c.Dv});
  W.fill(1.0);
  Grads g{HostTensor(c.dt, {c.B, c.Sq, c.Hq, c.D}), HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.D}),
          HostTensor(c.dt, {c.B, c.Sk, c.Hkv, c.Dv})};
  AttentionBwdParams p = bwd_params(c, t, W, g);
  p.gqa_reduction = static_cast<GqaReduction>(9);
  const Status st = attention_backward(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("gqa_reduction"), std::string::npos) << st.message();
}

// ---- varlen ----

TEST(AttentionVarlen, EqualsPerSequenceDenseForwardAndBackward) {
  const std::vector<int64_t> lq = {1, 0, 17, 65, 3}, lk = {5, 0, 17, 80, 1};
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    Case base;
    base.Hq = 4;
    base.Hkv = 2;
    base.mask.causal = causal;
    std::vector<int64_t> cq = {0}, ck = {0};
    for (size_t i = 0; i < lq.size(); ++i) {
      cq.push_back(cq.back() + lq[i]);
      ck.push_back(ck.back() + lk[i]);
    }
    std::mt19937 rng(11);
    HostTensor q(base.dt, {cq.back(), base.Hq, base.D}), k(base.dt, {ck.back(), base.Hkv, base.D}),
        v(base.dt, {ck.back(), base.Hkv, base.Dv}), out(base.dt, {cq.back(), base.Hq, base.Dv}),
        lse(DType::kFloat32, {base.Hq, cq.back()}), dout(base.dt, {cq.back(), base.Hq, base.Dv});
    q.randn(rng);
    k.randn(rng);
    v.randn(rng);
    dout.randn(rng);
    out.fill(std::nan(""));
    HostTensor cuq = index_tensor(DType::kInt32, cq), cuk = index_tensor(DType::kInt32, ck);
    AttentionFwdParams p;
    p.q = q.view;
    p.k = k.view;
    p.v = v.view;
    p.out = out.view;
    p.lse = lse.view;
    p.cu_seqlens_q = cuq.view;
    p.cu_seqlens_k = cuk.view;
    p.max_seqlen_q = 65;
    p.max_seqlen_k = 80;
    p.mask = base.mask;
    ASSERT_OK(attention_forward(p));
    HostTensor dq(base.dt, {cq.back(), base.Hq, base.D}), dk(base.dt, {ck.back(), base.Hkv, base.D}),
        dv(base.dt, {ck.back(), base.Hkv, base.Dv});
    dq.fill(std::nan(""));
    AttentionBwdParams pb;
    pb.q = q.view;
    pb.k = k.view;
    pb.v = v.view;
    pb.out = out.view;
    pb.lse = lse.view;
    pb.dout = dout.view;
    pb.dq = dq.view;
    pb.dk = dk.view;
    pb.dv = dv.view;
    pb.cu_seqlens_q = cuq.view;
    pb.cu_seqlens_k = cuk.view;
    pb.max_seqlen_q = 65;
    pb.max_seqlen_k = 80;
    pb.mask = base.mask;
    ASSERT_OK(attention_backward(pb));
    ASSERT_TRUE(all_finite(out.values()) && all_finite(dq.values()));
    for (size_t s = 0; s < lq.size(); ++s) {
      if (lq[s] == 0) continue;
      Case c = base;
      c.Sq = lq[s];
      c.Sk = lk[s];
      Tensors t = make(c, 0);
      for (int64_t i = 0; i < c.Sq * c.Hq * c.D; ++i) t.q.set(i, q.get(cq[s] * c.Hq * c.D + i));
      for (int64_t i = 0; i < c.Sk * c.Hkv * c.D; ++i) {
        t.k.set(i, k.get(ck[s] * c.Hkv * c.D + i));
        t.v.set(i, v.get(ck[s] * c.Hkv * c.Dv + i));
      }
      ASSERT_OK(attention_forward(fwd_params(c, t)));
      for (int64_t i = 0; i < c.Sq * c.Hq * c.Dv; ++i) EXPECT_EQ(t.out.get(i), out.get(cq[s] * c.Hq * c.Dv + i));
      for (int64_t h = 0; h < c.Hq; ++h)
        for (int64_t i = 0; i < c.Sq; ++i) EXPECT_EQ(t.lse.get(h * c.Sq + i), lse.get(h * cq.back() + cq[s] + i));
      HostTensor W(c.dt, {1, c.Sq, c.Hq, c.Dv});
      for (int64_t i = 0; i < W.numel(); ++i) W.set(i, dout.get(cq[s] * c.Hq * c.Dv + i));
      Grads g = run_backward(c, t, W, GqaReduction::kAtomic, true);
      for (int64_t i = 0; i < c.Sq * c.Hq * c.D; ++i) EXPECT_NEAR(g.dq.get(i), dq.get(cq[s] * c.Hq * c.D + i), 1e-13);
      for (int64_t i = 0; i < c.Sk * c.Hkv * c.D; ++i) {
        EXPECT_NEAR(g.dk.get(i), dk.get(ck[s] * c.Hkv * c.D + i), 1e-13);
        EXPECT_NEAR(g.dv.get(i), dv.get(ck[s] * c.Hkv * c.Dv + i), 1e-13);
      }
    }
  }
}

}  // namespace
}  // namespace attnkit::test
