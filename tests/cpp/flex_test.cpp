// tests/cpp/flex_test.cpp — CPU flex attention: the catalog against the equivalent dense options
// and against a naive float64 evaluation, BlockMask skipping against full evaluation, user
// functors, and gradients through score_mod against finite differences.
#include <functional>
#include <limits>

#include "attnkit/cpu/flex_cpu.hpp"
#include "flex_block_mask.hpp"
#include "test_util.hpp"

namespace attnkit::test {
namespace {

struct FlexCase {
  int64_t B = 2, Hq = 4, Hkv = 2, Sq = 45, Sk = 45, D = 8;
  DType dt = DType::kFloat64;
};

struct FlexTensors {
  HostTensor q, k, v, out, lse;
};

FlexTensors make(const FlexCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  FlexTensors t{HostTensor(c.dt, {c.B, c.Hq, c.Sq, c.D}), HostTensor(c.dt, {c.B, c.Hkv, c.Sk, c.D}),
                HostTensor(c.dt, {c.B, c.Hkv, c.Sk, c.D}), HostTensor(c.dt, {c.B, c.Hq, c.Sq, c.D}),
                HostTensor(DType::kFloat32, {c.B, c.Hq, c.Sq})};
  t.q.randn(rng);
  t.k.randn(rng);
  t.v.randn(rng);
  t.out.fill(std::nan(""));
  t.lse.fill(std::nan(""));
  return t;
}

FlexFwdParams params(FlexTensors& t) {
  FlexFwdParams p;
  p.q = t.q.view;
  p.k = t.k.view;
  p.v = t.v.view;
  p.out = t.out.view;
  p.lse = t.lse.view;
  return p;
}

using ScoreFn = std::function<double(double, int64_t, int64_t, int64_t, int64_t)>;

// Naive float64 flex: full score matrix per (b, h).
void naive(const FlexCase& c, const FlexTensors& t, const ScoreFn& score, const MaskFn& mask, std::vector<double>& out) {
  const auto q = t.q.values(), k = t.k.values(), v = t.v.values();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  out.assign(static_cast<size_t>(c.B * c.Hq * c.Sq * c.D), 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t hk = h / (c.Hq / c.Hkv);
      for (int64_t i = 0; i < c.Sq; ++i) {
        std::vector<double> s(static_cast<size_t>(c.Sk), -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity(), l = 0;
        for (int64_t j = 0; j < c.Sk; ++j) {
          if (!mask(b, h, i, j)) continue;
          double x = 0;
          for (int64_t d = 0; d < c.D; ++d) x += q[((b * c.Hq + h) * c.Sq + i) * c.D + d] * k[((b * c.Hkv + hk) * c.Sk + j) * c.D + d];
          s[j] = score(x * scale, b, h, i, j);
          m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j < c.Sk; ++j) l += std::isinf(s[j]) ? 0 : std::exp(s[j] - m);
        if (l == 0) continue;
        for (int64_t j = 0; j < c.Sk; ++j)
          if (!std::isinf(s[j]))
            for (int64_t d = 0; d < c.D; ++d)
              out[((b * c.Hq + h) * c.Sq + i) * c.D + d] += std::exp(s[j] - m) / l * v[((b * c.Hkv + hk) * c.Sk + j) * c.D + d];
      }
    }
}

const ScoreFn kIdentity = [](double s, int64_t, int64_t, int64_t, int64_t) { return s; };
const MaskFn kAll = [](int64_t, int64_t, int64_t, int64_t) { return true; };

TEST(FlexCatalog, MatchesDenseAttentionOptions) {
  FlexCase c;
  c.Sq = 40;
  c.Sk = 70;
  struct Variant {
    bool causal;
    int64_t window;
    double softcap;
  };
  for (Variant var : {Variant{true, -1, 0}, Variant{true, 11, 0}, Variant{false, -1, 3.0}, Variant{true, 5, 2.0}}) {
    FlexTensors t = make(c, 1);
    FlexFwdParams p = params(t);
    p.mods.causal = var.causal;
    p.mods.sliding_window = var.window;
    p.mods.softcap = var.softcap;
    ASSERT_OK(flex_attention_forward(p));
    // The same memory seen as BSHD by the softmax attention op (flex indices are top-left aligned).
    HostTensor out2 = t.out;
    HostTensor lse2 = t.lse;
    AttentionFwdParams a;
    a.q = t.q.view.transposed(1, 2);
    a.k = t.k.view.transposed(1, 2);
    a.v = t.v.view.transposed(1, 2);
    a.out = out2.view.transposed(1, 2);
    a.lse = lse2.view;
    a.mask.causal = var.causal;
    a.mask.align = CausalAlign::kTopLeft;
    a.mask.window_left = var.window;
    a.softcap = var.softcap;
    ASSERT_OK(attention_forward(a));
    EXPECT_LE(max_abs_diff(t.out.values(), out2.values()), 1e-12);
    const auto l1 = t.lse.values(), l2 = lse2.values();
    for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l1[i], l2[i], 1e-5 * (1 + std::abs(l2[i])));
  }
}

TEST(FlexCatalog, MatchesNaiveEvaluation) {
  FlexCase c;
  c.Sq = 37;
  c.Sk = 53;
  FlexTensors t = make(c, 2);
  std::mt19937 rng(3);
  HostTensor slopes(DType::kFloat32, {c.Hq}), bias(DType::kFloat32, {c.Hq, 2 * c.Sk - 1}), prefix(DType::kInt32, {c.B});
  HostTensor doc_q(DType::kInt32, {c.B, c.Sq}), doc_kv(DType::kInt32, {c.B, c.Sk});
  for (int64_t h = 0; h < c.Hq; ++h) slopes.set(h, std::exp2(-8.0 * (h + 1) / c.Hq));
  bias.randn(rng);
  prefix.set(0, 7);
  prefix.set(1, 20);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t i = 0; i < c.Sq; ++i) doc_q.set(b * c.Sq + i, i / (10 + b));
    for (int64_t j = 0; j < c.Sk; ++j) doc_kv.set(b * c.Sk + j, j / (10 + b));
  }
  struct Variant {
    const char* name;
    std::function<void(FlexMods&)> set;
    ScoreFn score;
    MaskFn mask;
  };
  const std::vector<Variant> variants = {
      {"alibi+causal", [&](FlexMods& m) { m.alibi_slopes = slopes.view; m.causal = true; },
       [&](double s, int64_t, int64_t h, int64_t i, int64_t j) { return s + slopes.get(h) * (j - i); },
       [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; }},
      {"rel_bias", [&](FlexMods& m) { m.rel_bias = bias.view; },
       [&](double s, int64_t, int64_t h, int64_t i, int64_t j) { return s + bias.get(h * (2 * c.Sk - 1) + i - j + c.Sk - 1); },
       kAll},
      {"prefix_lm", [&](FlexMods& m) { m.causal = true; m.prefix_lengths = prefix.view; }, kIdentity,
       [&](int64_t b, int64_t, int64_t i, int64_t j) { return j <= i || j < prefix.get(b); }},
      {"document+causal", [&](FlexMods& m) { m.causal = true; m.document_ids_q = doc_q.view; m.document_ids_kv = doc_kv.view; },
       kIdentity,
       [&](int64_t b, int64_t, int64_t i, int64_t j) { return j <= i && doc_q.get(b * c.Sq + i) == doc_kv.get(b * c.Sk + j); }},
      {"softcap+alibi+window", [&](FlexMods& m) { m.softcap = 1.5; m.alibi_slopes = slopes.view; m.sliding_window = 6; },
       [&](double s, int64_t, int64_t h, int64_t i, int64_t j) { return 1.5 * std::tanh((s + slopes.get(h) * (j - i)) / 1.5); },
       [](int64_t, int64_t, int64_t i, int64_t j) { return i - j <= 6; }},
  };
  for (const Variant& var : variants) {
    SCOPED_TRACE(var.name);
    FlexTensors u = t;
    FlexFwdParams p = params(u);
    var.set(p.mods);
    ASSERT_OK(flex_attention_forward(p));
    std::vector<double> ref;
    naive(c, u, var.score, var.mask, ref);
    ASSERT_TRUE(all_finite(u.out.values()));
    EXPECT_LE(max_abs_diff(u.out.values(), ref), 1e-12);
  }
}

// holds_on_box (the kernels skip a mask part's pass over a tile where it says true): over random
// boxes, true only where the part holds on every element, and true where the corners say so for
// the monotone parts (causal, prefix-LM's causal half, sliding window); never for documents.
TEST(FlexCatalog, MaskPartHoldsOnBoxExactlyWhenEveryElementDoes) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int64_t> pos(0, 60), len(0, 12);
  const int32_t prefix[1] = {20};
  const int32_t doc[80] = {};  // one document: the part holds everywhere, yet cannot be told from corners
  const PrefixLmMaskMod prefix_lm{prefix, 1};
  const DocumentMaskMod documents{doc, doc};
  int told = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int64_t q_lo = pos(rng), q_hi = q_lo + len(rng), kv_lo = pos(rng), kv_hi = kv_lo + len(rng);
    const SlidingWindowMaskMod window{len(rng)};
    auto every = [&](const auto& part) {
      for (int64_t q = q_lo; q <= q_hi; ++q)
        for (int64_t kv = kv_lo; kv <= kv_hi; ++kv)
          if (!part(0, 0, q, kv)) return false;
      return true;
    };
    SCOPED_TRACE("q [" + std::to_string(q_lo) + ", " + std::to_string(q_hi) + "] kv [" + std::to_string(kv_lo) + ", " +
                 std::to_string(kv_hi) + "]");
    EXPECT_EQ(holds_on_box(CausalMaskMod{}, q_lo, q_hi, kv_lo, kv_hi), every(CausalMaskMod{}));
    EXPECT_EQ(holds_on_box(window, q_lo, q_hi, kv_lo, kv_hi), every(window)) << "window " << window.window;
    // Prefix-LM: told from its causal half only, so true implies every element holds.
    if (holds_on_box(prefix_lm, q_lo, q_hi, kv_lo, kv_hi)) EXPECT_TRUE(every(prefix_lm));
    EXPECT_FALSE(holds_on_box(documents, q_lo, q_hi, kv_lo, kv_hi));
    told += holds_on_box(CausalMaskMod{}, q_lo, q_hi, kv_lo, kv_hi);
  }
  EXPECT_GT(told, 500);  // the random boxes hit both answers
}

TEST(FlexBlockMask, SkippingEqualsFullEvaluation) {
  FlexCase c;
  c.Sq = 70;
  c.Sk = 90;
  FlexTensors t = make(c, 4);
  const MaskFn causal = [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; };
  for (auto [bq, bk, use_full] : {std::tuple{16, 16, true}, std::tuple{32, 16, false}, std::tuple{128, 128, true}}) {
    SCOPED_TRACE("bq=" + std::to_string(bq) + " bk=" + std::to_string(bk));
    HostBlockMask bm = build_block_mask(c.Sq, c.Sk, bq, bk, 1, 1, causal, use_full);  // broadcast over B and H
    FlexTensors u = t;
    FlexFwdParams p = params(u);
    p.mods.causal = true;
    p.block_mask = bm.view();
    ASSERT_OK(flex_attention_forward(p));
    FlexTensors w = t;
    FlexFwdParams pw = params(w);
    pw.mods.causal = true;
    ASSERT_OK(flex_attention_forward(pw));
    EXPECT_LE(max_abs_diff(u.out.values(), w.out.values()), 1e-12);
  }
}

TEST(FlexBlockMask, UnlistedBlocksAreSkippedAndFullBlocksSkipMaskMod) {
  FlexCase c;
  c.Sq = 48;
  c.Sk = 48;
  FlexTensors t = make(c, 5);
  // Per-head lists: head h lists only key blocks kb with (kb + h) even, all as "full", while the
  // mask_mod (causal) is deliberately not applied to full blocks.
  const MaskFn pattern = [](int64_t, int64_t h, int64_t, int64_t j) { return ((j / 16) + h) % 2 == 0; };
  HostBlockMask bm = build_block_mask(c.Sq, c.Sk, 16, 16, c.B, c.Hq, pattern);
  FlexFwdParams p = params(t);
  p.mods.causal = true;
  p.block_mask = bm.view();
  ASSERT_OK(flex_attention_forward(p));
  std::vector<double> ref;
  naive(c, t, kIdentity, pattern, ref);  // causal ignored: every listed block is full
  EXPECT_LE(max_abs_diff(t.out.values(), ref), 1e-12);
}

// A user-defined score mod through the template entry point.
struct QuadraticBias {
  double alpha;
  template <class T>
  T operator()(T s, int64_t, int64_t, int64_t q, int64_t kv, T* ds) const {
    *ds = T(1);
    const T d = static_cast<T>(q - kv);
    return s - static_cast<T>(alpha) * d * d;
  }
};
struct EvenKeysOnly {
  bool operator()(int64_t, int64_t, int64_t, int64_t kv) const { return kv % 2 == 0; }
};

TEST(FlexCustomMods, UserFunctorsMatchNaive) {
  FlexCase c;
  FlexTensors t = make(c, 6);
  ASSERT_OK(cpu::flex_forward_with_mods(params(t), QuadraticBias{0.01}, EvenKeysOnly{}));
  std::vector<double> ref;
  naive(c, t, [](double s, int64_t, int64_t, int64_t i, int64_t j) { return s - 0.01 * (i - j) * (i - j); },
        [](int64_t, int64_t, int64_t, int64_t j) { return j % 2 == 0; }, ref);
  EXPECT_LE(max_abs_diff(t.out.values(), ref), 1e-12);
}

TEST(FlexBackward, GradientsThroughScoreModMatchFiniteDifferences) {
  FlexCase c;
  c.Sq = 33;
  c.Sk = 40;
  FlexTensors t = make(c, 7);
  std::mt19937 rng(8);
  HostTensor slopes(DType::kFloat32, {c.Hq}), bias(DType::kFloat32, {1, 2 * c.Sk - 1});
  slopes.uniform(rng, 0.05, 0.5);
  bias.randn(rng);
  auto set_mods = [&](FlexMods& m) {
    m.alibi_slopes = slopes.view;
    m.rel_bias = bias.view;
    m.softcap = 2.0;
    m.causal = true;
  };
  HostBlockMask bm = build_block_mask(c.Sq, c.Sk, 16, 16, 1, 1, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; });
  FlexFwdParams p = params(t);
  set_mods(p.mods);
  p.block_mask = bm.view();
  ASSERT_OK(flex_attention_forward(p));
  HostTensor W(c.dt, {c.B, c.Hq, c.Sq, c.D});
  W.randn(rng);
  HostTensor dq(c.dt, {c.B, c.Hq, c.Sq, c.D}), dk(c.dt, {c.B, c.Hkv, c.Sk, c.D}), dv(c.dt, {c.B, c.Hkv, c.Sk, c.D});
  dq.fill(std::nan(""));
  dk.fill(std::nan(""));
  dv.fill(std::nan(""));
  FlexBwdParams b;
  b.q = t.q.view;
  b.k = t.k.view;
  b.v = t.v.view;
  b.out = t.out.view;
  b.lse = t.lse.view;
  b.dout = W.view;
  b.dq = dq.view;
  b.dk = dk.view;
  b.dv = dv.view;
  set_mods(b.mods);
  b.block_mask = bm.view();
  ASSERT_OK(flex_attention_backward(b));
  ASSERT_TRUE(all_finite(dq.values()) && all_finite(dk.values()) && all_finite(dv.values()));
  auto loss = [&]() {
    FlexTensors u = t;
    FlexFwdParams pu = params(u);
    set_mods(pu.mods);
    pu.block_mask = bm.view();
    EXPECT_TRUE(flex_attention_forward(pu).ok());
    const auto o = u.out.values(), w = W.values();
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
    return s;
  };
  for (auto [x, g] : {std::pair{&t.q, &dq}, std::pair{&t.k, &dk}, std::pair{&t.v, &dv}}) {
    std::uniform_int_distribution<int64_t> pick(0, x->numel() - 1);
    for (int s = 0; s < 10; ++s) {
      const int64_t i = pick(rng);
      const double fd = central_difference(*x, i, loss);
      EXPECT_NEAR(g->get(i), fd, 1e-6 * (1 + std::abs(fd))) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace attnkit::test
