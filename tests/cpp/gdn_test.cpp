// tests/cpp/gdn_test.cpp — the CPU gated delta rule: chunked and recurrent forward against the
// float64 token-recurrence oracle (tails, strong/zero gates, options, GVA, layouts, varlen), and
// bf16 inputs with FLA's metric. Gradients are in gdn_backward_test.cpp.
#include "gdn_test_util.hpp"

namespace attnkit::test {
namespace {

void expect_forward_matches_oracle(const GdnCase& c, uint32_t seed, double tol) {
  GdnData d = make_gdn(c, seed);
  ASSERT_OK(run_gdn_forward(c, d));
  std::vector<double> o_ref, ht_ref;
  gdn_oracle(c, d, o_ref, ht_ref);
  const auto o = d.out.values(), ht = d.ht.values();
  ASSERT_TRUE(all_finite(o) && all_finite(ht));
  EXPECT_LE(rel_rms(o, o_ref), tol);
  EXPECT_LE(rel_rms(ht, ht_ref), tol);
}

TEST(GdnForward, ChunkedMatchesRecurrenceOracleOnAwkwardLengths) {
  for (int64_t T : {1, 17, 63, 64, 65, 127, 200}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    GdnCase c;
    c.T = T;
    c.B = 2;
    expect_forward_matches_oracle(c, 1, 1e-12);
  }
}

TEST(GdnForward, EveryTailChunkLength) {
  for (int64_t tail = 1; tail <= 63; ++tail) {
    SCOPED_TRACE("tail=" + std::to_string(tail));
    GdnCase c;
    c.T = 64 + tail;
    c.H = c.HV = 1;
    c.K = c.V = 4;
    expect_forward_matches_oracle(c, static_cast<uint32_t>(tail), 1e-12);
  }
}

TEST(GdnForward, RecurrentAlgorithmMatchesOracle) {
  GdnCase c;
  c.algo = GdnAlgorithm::kRecurrent;
  c.T = 90;
  expect_forward_matches_oracle(c, 2, 1e-12);
}

TEST(GdnForward, PerKeyGate) {
  GdnCase c;
  c.scalar_gate = false;
  c.per_key_gate = true;
  c.T = 100;
  expect_forward_matches_oracle(c, 3, 1e-12);
}

TEST(GdnForward, StrongGatesGiveNoNaN) {
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    for (bool per_key : {false, true}) {
      GdnCase c;
      c.dt = dt;
      c.T = 130;
      c.g_lo = -16;
      c.g_hi = -8;
      c.scalar_gate = !per_key;
      c.per_key_gate = per_key;
      expect_forward_matches_oracle(c, 4, dt == DType::kFloat64 ? 1e-12 : 1e-5);
    }
  }
}

TEST(GdnForward, ZeroGatesAndNoGate) {
  GdnCase c;
  c.g_lo = c.g_hi = 0.0;
  expect_forward_matches_oracle(c, 5, 1e-12);
  c.scalar_gate = false;  // no gate tensor at all: no decay
  expect_forward_matches_oracle(c, 5, 1e-12);
}

TEST(GdnForward, InOpOptions) {
  GdnCase c;
  c.l2norm = true;
  c.beta_logit = true;
  c.fused_gate = true;
  c.T = 75;
  expect_forward_matches_oracle(c, 6, 1e-12);
}

TEST(GdnForward, GvaRatios) {
  for (int64_t ratio : {1, 2, 4}) {
    GdnCase c;
    c.H = 2;
    c.HV = 2 * ratio;
    expect_forward_matches_oracle(c, 7, 1e-12);
  }
}

TEST(GdnForward, StateLayoutsAgree) {
  GdnCase a;
  a.K = 8;
  a.V = 4;  // K != V so a transposition mistake cannot hide
  GdnCase b = a;
  b.layout = StateLayout::kVK;
  expect_forward_matches_oracle(a, 8, 1e-12);
  expect_forward_matches_oracle(b, 8, 1e-12);
  GdnData da = make_gdn(a, 9), db = make_gdn(b, 9);
  for (int64_t n = 0; n < a.N(); ++n)  // the same logical initial state in both layouts
    for (int64_t hv = 0; hv < a.HV; ++hv)
      for (int64_t kk = 0; kk < a.K; ++kk)
        for (int64_t vv = 0; vv < a.V; ++vv)
          db.h0.set(state_index(b, n, hv, kk, vv), da.h0.get(state_index(a, n, hv, kk, vv)));
  ASSERT_OK(run_gdn_forward(a, da));
  ASSERT_OK(run_gdn_forward(b, db));
  EXPECT_EQ(max_abs_diff(da.out.values(), db.out.values()), 0.0);
  for (int64_t hv = 0; hv < a.HV; ++hv)
    for (int64_t kk = 0; kk < a.K; ++kk)
      for (int64_t vv = 0; vv < a.V; ++vv)
        EXPECT_EQ(da.ht.get(state_index(a, 0, hv, kk, vv)), db.ht.get(state_index(b, 0, hv, kk, vv)));
}

TEST(GdnForward, VarlenWithOneTokenAndEmptySequences) {
  GdnCase c;
  c.seqlens = {1, 0, 70, 1, 130, 64};
  c.T = 266;
  c.HV = 4;
  expect_forward_matches_oracle(c, 10, 1e-12);
}

TEST(GdnForward, Bf16InputsMeetFlaTolerance) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    GdnCase c;
    c.dt = dt;
    c.T = 200;
    c.K = c.V = 32;
    c.HV = 4;
    c.l2norm = true;
    GdnData d = make_gdn(c, 11);
    ASSERT_OK(run_gdn_forward(c, d));
    std::vector<double> o_ref, ht_ref;
    gdn_oracle(c, d, o_ref, ht_ref);  // the oracle reads the same rounded inputs
    EXPECT_LT(rel_rms(d.out.values(), o_ref), 0.005);
    EXPECT_LT(rel_rms(d.ht.values(), ht_ref), 0.005);
  }
}

// ---- decode ----

TEST(GdnDecode, MatchesRecurrenceThroughStateIndicesInPlace) {
  GdnCase c;
  c.B = 3;
  c.T = 3;  // tokens per sequence
  c.HV = 4;
  c.fused_gate = true;
  c.beta_logit = true;
  c.l2norm = true;
  GdnData d = make_gdn(c, 12);
  // Pool of 5 slots; sequences use slots 4, (padding), 1.
  HostTensor pool(DType::kFloat32, {5, c.HV, c.K, c.V});
  std::mt19937 rng(13);
  pool.randn(rng, 0.5);
  const HostTensor pool0 = pool;
  HostTensor idx = index_tensor(DType::kInt32, {4, -1, 1});
  for (int64_t n : {0, 2}) {  // the oracle's h0 is the slot's state
    const int64_t slot = n == 0 ? 4 : 1;
    for (int64_t i = 0; i < c.HV * c.K * c.V; ++i) d.h0.set(n * c.HV * c.K * c.V + i, pool0.get(slot * c.HV * c.K * c.V + i));
  }
  GdnDecodeParams p;
  p.q = d.q.view;
  p.k = d.k.view;
  p.v = d.v.view;
  p.beta = d.beta.view;
  p.g = d.g.view;
  p.A_log = d.A_log.view;
  p.dt_bias = d.dt_bias.view;
  p.state = pool.view;
  p.state_indices = idx.view;
  p.out = d.out.view;
  p.use_qk_l2norm = true;
  p.beta_is_logit = true;
  ASSERT_OK(gdn_decode(p));
  std::vector<double> o_ref, ht_ref;
  gdn_oracle(c, d, o_ref, ht_ref);
  const int64_t per_seq_o = c.T * c.HV * c.V, per_state = c.HV * c.K * c.V;
  for (int64_t n : {0, 2}) {
    const int64_t slot = n == 0 ? 4 : 1;
    for (int64_t i = 0; i < per_seq_o; ++i) EXPECT_NEAR(d.out.get(n * per_seq_o + i), o_ref[n * per_seq_o + i], 1e-10);
    for (int64_t i = 0; i < per_state; ++i) EXPECT_NEAR(pool.get(slot * per_state + i), ht_ref[n * per_state + i], 1e-5);
  }
  for (int64_t i = 0; i < per_seq_o; ++i) EXPECT_EQ(d.out.get(per_seq_o + i), 0.0);  // padding slot
  for (int64_t slot : {0, 2, 3})  // untouched slots
    for (int64_t i = 0; i < per_state; ++i) EXPECT_EQ(pool.get(slot * per_state + i), pool0.get(slot * per_state + i));
}

}  // namespace
}  // namespace attnkit::test
