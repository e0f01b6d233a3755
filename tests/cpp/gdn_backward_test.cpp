// tests/cpp/gdn_backward_test.cpp — every gradient of the CPU gated delta rule (dq, dk, dv, dg or
// dgk, dbeta, dh0, dA_log, ddt_bias) against central finite differences of the forward, the
// chunked backward against the recurrent one, bf16 with FLA's tolerances, and determinism.
#include "gdn_test_util.hpp"

namespace attnkit::test {
namespace {

double loss(const GdnCase& c, GdnData d, const Cotangents& ct) {
  EXPECT_TRUE(run_gdn_forward(c, d).ok());
  const auto o = d.out.values(), w = ct.W.values(), ht = d.ht.values(), w2 = ct.W2.values();
  double s = 0;
  for (size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
  for (size_t i = 0; i < ht.size(); ++i) s += ht[i] * w2[i];
  return s;
}

void expect_matches_finite_differences(const GdnCase& c, uint32_t seed, int samples = 6) {
  GdnData d = make_gdn(c, seed);
  const Cotangents ct = make_cotangents(c, seed + 100);
  GdnGrads g = run_backward(c, d, ct);
  std::mt19937 rng(seed + 200);
  std::vector<std::pair<const char*, std::pair<HostTensor*, HostTensor*>>> pairs = {
      {"dq", {&d.q, &g.dq}}, {"dk", {&d.k, &g.dk}}, {"dv", {&d.v, &g.dv}}, {"dbeta", {&d.beta, &g.dbeta}}};
  if (d.g.view.defined()) pairs.push_back({"dg", {&d.g, &g.dg}});
  if (d.gk.view.defined()) pairs.push_back({"dgk", {&d.gk, &g.dg}});
  if (d.h0.view.defined()) pairs.push_back({"dh0", {&d.h0, &g.dh0}});
  if (d.A_log.view.defined()) {
    pairs.push_back({"dA_log", {&d.A_log, &g.dA_log}});
    pairs.push_back({"ddt_bias", {&d.dt_bias, &g.ddt_bias}});
  }
  for (auto& [name, xg] : pairs) {
    HostTensor* x = xg.first;
    ASSERT_TRUE(all_finite(xg.second->values())) << name << " has unwritten or non-finite elements";
    std::uniform_int_distribution<int64_t> pick(0, x->numel() - 1);
    for (int s = 0; s < samples; ++s) {
      const int64_t i = pick(rng);
      const double fd = central_difference(*x, i, [&] { return loss(c, d, ct); });
      EXPECT_NEAR(xg.second->get(i), fd, 2e-6 * (1 + std::abs(fd))) << name << " element " << i;
    }
  }
}

TEST(GdnBackward, ChunkedScalarGateMatchesFiniteDifferences) {
  GdnCase c;
  c.T = 70;  // one full chunk and a tail
  c.HV = 4;  // GVA 2
  expect_matches_finite_differences(c, 1);
}

TEST(GdnBackward, InOpOptionsMatchFiniteDifferences) {
  GdnCase c;
  c.T = 67;
  c.l2norm = true;
  c.beta_logit = true;
  c.fused_gate = true;
  c.HV = 4;
  expect_matches_finite_differences(c, 2);
}

TEST(GdnBackward, PerKeyGateMatchesFiniteDifferences) {
  GdnCase c;
  c.scalar_gate = false;
  c.per_key_gate = true;
  c.T = 70;
  expect_matches_finite_differences(c, 3);
}

TEST(GdnBackward, VarlenAndVFirstLayoutMatchFiniteDifferences) {
  GdnCase c;
  c.seqlens = {1, 0, 66, 3};
  c.T = 70;
  c.layout = StateLayout::kVK;
  c.V = 4;
  expect_matches_finite_differences(c, 4);
}

TEST(GdnBackward, StrongGatesMatchFiniteDifferences) {
  GdnCase c;
  c.T = 66;
  c.g_lo = -16;
  c.g_hi = -2;
  expect_matches_finite_differences(c, 5);
}

TEST(GdnBackward, NoGateAndNoInitialState) {
  GdnCase c;
  c.scalar_gate = false;
  c.h0 = false;
  c.T = 65;
  expect_matches_finite_differences(c, 6);
}

TEST(GdnBackward, ChunkedAgreesWithRecurrentOnLongSequences) {
  GdnCase c;
  c.T = 300;
  c.HV = 4;
  c.fused_gate = true;
  c.l2norm = true;
  GdnData d = make_gdn(c, 7);
  const Cotangents ct = make_cotangents(c, 8);
  GdnGrads a = run_backward(c, d, ct);
  GdnCase r = c;
  r.algo = GdnAlgorithm::kRecurrent;
  GdnGrads b = run_backward(r, d, ct);
  for (auto [x, y] : {std::pair{&a.dq, &b.dq}, std::pair{&a.dk, &b.dk}, std::pair{&a.dv, &b.dv},
                      std::pair{&a.dbeta, &b.dbeta}, std::pair{&a.dg, &b.dg}, std::pair{&a.dh0, &b.dh0},
                      std::pair{&a.dA_log, &b.dA_log}})
    EXPECT_LE(rel_rms(x->values(), y->values()), 1e-10);
}

TEST(GdnBackward, Bf16MeetsFlaTolerancesAgainstFloat64) {
  GdnCase c;
  c.dt = DType::kBFloat16;
  c.T = 150;
  c.K = c.V = 32;
  c.HV = 4;
  c.l2norm = true;
  GdnData d = make_gdn(c, 9);
  const Cotangents ct = make_cotangents(c, 10);
  GdnGrads g = run_backward(c, d, ct);
  GdnCase c64;
  const GdnData d64 = float64_twin(c, d, c64);  // the float64 run reads exactly the bf16-rounded values
  Cotangents ct64{ct.W.to(DType::kFloat64), ct.W2.to(DType::kFloat64)};
  GdnGrads r = run_backward(c64, d64, ct64);
  EXPECT_LT(rel_rms(g.dq.values(), r.dq.values()), 0.008);
  EXPECT_LT(rel_rms(g.dk.values(), r.dk.values()), 0.008);
  EXPECT_LT(rel_rms(g.dv.values(), r.dv.values()), 0.008);
  EXPECT_LT(rel_rms(g.dh0.values(), r.dh0.values()), 0.008);
  EXPECT_LT(rel_rms(g.dbeta.values(), r.dbeta.values()), 0.02);
  EXPECT_LT(rel_rms(g.dg.values(), r.dg.values()), 0.02);
}

TEST(GdnBackward, BitwiseDeterministic) {
  GdnCase c;
  c.dt = DType::kFloat32;
  c.T = 130;
  c.HV = 8;
  c.fused_gate = true;
  GdnData d = make_gdn(c, 11);
  const Cotangents ct = make_cotangents(c, 12);
  GdnGrads first = run_backward(c, d, ct);
  for (int i = 0; i < 10; ++i) {
    GdnGrads again = run_backward(c, d, ct);
    EXPECT_EQ(first.dq.buf, again.dq.buf);
    EXPECT_EQ(first.dk.buf, again.dk.buf);
    EXPECT_EQ(first.dg.buf, again.dg.buf);
    EXPECT_EQ(first.dA_log.buf, again.dA_log.buf);
  }
}

}  // namespace
}  // namespace attnkit::test
