// tests/cpp/gdn_segment_test.cpp — the CPU reference of the segment split (spec/gdn.md: a run of
// tokens maps its start state affinely, end = M start + S): M and S against the token recurrence
// from random start states, and a sequence cut into segments stitched back to the whole run's
// final state, for scalar and per-key gates, strong gates and gates of 0; and the CUDA forward's
// choice of how many segments to cut a sequence into.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "src/cpu/gdn_head.hpp"
#include "src/cuda/gdn/chunk_fwd_plan.hpp"

namespace attnkit::cpu {
namespace {

GdnHead<double> random_head(int64_t T, int64_t K, int64_t V, int64_t gdim, double gate_scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n01(0.0, 1.0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  GdnHead<double> x;
  x.T = T, x.K = K, x.V = V, x.gdim = gdim;
  x.q.resize(T * K), x.k.resize(T * K), x.v.resize(T * V), x.g.resize(T * gdim), x.beta.resize(T);
  for (int64_t t = 0; t < T; ++t) {
    double norm = 0;
    for (int64_t d = 0; d < K; ++d) norm += (x.k[t * K + d] = n01(rng)) * x.k[t * K + d];
    for (int64_t d = 0; d < K; ++d) x.k[t * K + d] /= std::sqrt(norm);  // l2-normalised keys, as the op's option
    for (int64_t d = 0; d < K; ++d) x.q[t * K + d] = n01(rng);
    for (int64_t e = 0; e < V; ++e) x.v[t * V + e] = n01(rng);
    for (int64_t d = 0; d < gdim; ++d) x.g[t * gdim + d] = -gate_scale * u01(rng);
    x.beta[t] = u01(rng);
  }
  return x;
}

// The token recurrence over [t0, t1) from h (in place).
void run(const GdnHead<double>& x, int64_t t0, int64_t t1, std::vector<double>& h) {
  GdnHead<double> part = x;
  const int64_t K = x.K, V = x.V, n = t1 - t0;
  part.T = n;
  part.q.assign(x.q.begin() + t0 * K, x.q.begin() + t1 * K);
  part.k.assign(x.k.begin() + t0 * K, x.k.begin() + t1 * K);
  part.v.assign(x.v.begin() + t0 * V, x.v.begin() + t1 * V);
  part.g.assign(x.g.begin() + t0 * x.gdim, x.g.begin() + t1 * x.gdim);
  part.beta.assign(x.beta.begin() + t0, x.beta.begin() + t1);
  std::vector<double> o(static_cast<size_t>(n * V));
  gdn_recurrent_forward(part, 1.0, o.data(), h.data());
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

struct Case {
  int64_t gdim;
  double gate_scale;
};

TEST(GdnSegmentAffine, EndStateIsAffineInTheStartState) {
  const int64_t T = 150, K = 8, V = 6;
  for (const Case c : {Case{1, 0.5}, Case{1, 0.0}, Case{1, 8.0}, Case{K, 1.0}}) {
    SCOPED_TRACE("gdim=" + std::to_string(c.gdim) + " gate_scale=" + std::to_string(c.gate_scale));
    const GdnHead<double> x = random_head(T, K, V, c.gdim, c.gate_scale, 7);
    std::vector<double> M(K * K), S(K * V);
    gdn_segment_affine(x, 37, 131, M.data(), S.data());
    std::mt19937 rng(3);
    std::normal_distribution<double> n01(0.0, 1.0);
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<double> h(K * V);
      for (double& e : h) e = n01(rng);
      std::vector<double> expect = h;
      run(x, 37, 131, expect);
      std::vector<double> got(K * V, 0.0);
      for (int64_t d = 0; d < K; ++d)
        for (int64_t e = 0; e < V; ++e) {
          double s = S[d * V + e];
          for (int64_t j = 0; j < K; ++j) s += M[d * K + j] * h[j * V + e];
          got[d * V + e] = s;
        }
      EXPECT_LE(max_abs_diff(got, expect), 1e-12);
    }
  }
}

TEST(GdnSegmentAffine, SegmentsStitchToTheWholeRun) {
  const int64_t T = 200, K = 8, V = 6;
  const GdnHead<double> x = random_head(T, K, V, 1, 0.02, 11);  // weak gates: M must carry the start state
  std::vector<double> whole(K * V, 0.0);
  for (double& e : whole) e = 0.25;  // a nonzero h0
  std::vector<double> stitched = whole;
  run(x, 0, T, whole);
  const int64_t cuts[] = {0, 64, 65, 128, 200};  // chunk-aligned and not, and a 1-token segment
  for (int s = 0; s + 1 < 5; ++s) {
    std::vector<double> M(K * K), S(K * V), next(K * V);
    gdn_segment_affine(x, cuts[s], cuts[s + 1], M.data(), S.data());
    for (int64_t d = 0; d < K; ++d)
      for (int64_t e = 0; e < V; ++e) {
        double v = S[d * V + e];
        for (int64_t j = 0; j < K; ++j) v += M[d * K + j] * stitched[j * V + e];
        next[d * V + e] = v;
      }
    stitched = next;
  }
  EXPECT_LE(max_abs_diff(stitched, whole), 1e-12);
  // An empty segment is the identity map.
  std::vector<double> M(K * K), S(K * V);
  gdn_segment_affine(x, 50, 50, M.data(), S.data());
  for (int64_t d = 0; d < K; ++d)
    for (int64_t e = 0; e < K; ++e) EXPECT_EQ(M[d * K + e], d == e ? 1.0 : 0.0);
  for (double e : S) EXPECT_EQ(e, 0.0);
}

}  // namespace
}  // namespace attnkit::cpu

// The CUDA forward's choice of segments (host arithmetic, src/cuda/gdn/chunk_fwd_plan.hpp), on
// the shapes it was measured on (132 SMs, K = V = 128: 2 value blocks, 2 virtual ones).
namespace attnkit::cuda::gdn {
namespace {

TEST(GdnSplitPlan, FewChainsSplitManyDoNot) {
  const SplitPlan b1 = plan_split(128, 16, 2, 2, 132, 0);  // B1 T8192 H16: 32 chains
  EXPECT_EQ(b1.count, 3);
  EXPECT_EQ(b1.chunks, 43);
  EXPECT_EQ(plan_split(128, 32, 2, 2, 132, 0).count, 2);   // B2 H16: 64 chains, one wave of 128 CTAs
  EXPECT_EQ(plan_split(512, 32, 2, 2, 132, 0).count, 2);   // B1 T32768 H32
  EXPECT_EQ(plan_split(128, 48, 2, 2, 132, 0).count, 1);   // 96 chains: two segments would be two waves
  EXPECT_EQ(plan_split(128, 64, 2, 2, 132, 0).count, 1);   // B4 H16 / B1 H64: 128 chains
  EXPECT_EQ(plan_split(128, 128, 2, 2, 132, 0).count, 1);  // B2 H64
  EXPECT_GT(plan_split(128, 8, 2, 2, 132, 0).count, 2);    // B1 H8: 16 chains
  EXPECT_EQ(plan_split(4, 1, 2, 2, 132, 0).count, 1);      // too short to pay for two more launches
  EXPECT_EQ(plan_split(1, 1, 2, 2, 132, 0).count, 1);      // one chunk: nothing to split
  EXPECT_EQ(plan_split(128, 0, 2, 2, 132, 0).count, 1);    // no heads
}

TEST(GdnSplitPlan, RequestedCountsAreKeptWithinTheChunks) {
  EXPECT_EQ(plan_split(128, 64, 2, 2, 132, 1).count, 1);  // 1: never
  const SplitPlan four = plan_split(128, 64, 2, 2, 132, 4);
  EXPECT_EQ(four.count, 4);
  EXPECT_EQ(four.chunks, 32);
  const SplitPlan odd = plan_split(16, 1, 2, 2, 132, 5);  // 16 chunks in 5: 4 segments of 4
  EXPECT_EQ(odd.chunks, 4);
  EXPECT_EQ(odd.count, 4);
  const SplitPlan many = plan_split(3, 1, 2, 2, 132, 100);  // one a chunk at most
  EXPECT_EQ(many.count, 3);
  EXPECT_EQ(many.chunks, 1);
  // Every plan covers the chunks: (count - 1) * chunks < nchunks <= count * chunks.
  for (int64_t n : {2, 3, 17, 128, 1000})
    for (int r : {0, 2, 3, 7, 16}) {
      const SplitPlan s = plan_split(n, 4, 2, 2, 132, r);
      if (s.count == 1) continue;
      EXPECT_LT(int64_t(s.count - 1) * s.chunks, n) << n << " " << r;
      EXPECT_GE(int64_t(s.count) * s.chunks, n) << n << " " << r;
    }
}

// bwd_dhu's plan: the value block (the widest whose CTAs fill at least half of the SMs), then its
// own split only with few chains, and never where the rows do not take it.
TEST(GdnBwdDhuPlan, ValueBlockThenSplitWithFewChains) {
  EXPECT_EQ(plan_bwd_dhu(128, 128, 128, 128, 132, 0, true).bv, 64);  // B1 H64 / B4 H16
  const DhuPlan b2 = plan_bwd_dhu(128, 32, 128, 128, 132, 0, true);   // B2 H16: 128 CTAs of 32 columns
  EXPECT_EQ(b2.bv, 32);
  EXPECT_EQ(b2.split.count, 1);
  EXPECT_EQ(plan_bwd_dhu(128, 16, 128, 128, 132, 0, true).bv, 16);        // B1 H16: 128 CTAs of 16
  EXPECT_EQ(plan_bwd_dhu(128, 16, 128, 128, 132, 0, true).split.count, 1);
  const DhuPlan b1h4 = plan_bwd_dhu(128, 4, 128, 128, 132, 0, true);  // B1 T8192 H4: 32 CTAs of 128 chunks
  EXPECT_EQ(b1h4.bv, 16);
  EXPECT_EQ(b1h4.split.count, 3);  // 96 CTAs of 43 chunks in each pass (4: 160 in the first, two waves)
  EXPECT_EQ(b1h4.split.chunks, 43);
  EXPECT_EQ(plan_bwd_dhu(128, 8, 128, 128, 132, 0, true).split.count, 1);  // B1 H8: 64 chains, not worth it
  EXPECT_GT(plan_bwd_dhu(128, 1, 128, 128, 132, 0, true).split.count, 3);  // B1 H1: 8 chains
  EXPECT_EQ(plan_bwd_dhu(128, 4, 128, 128, 132, 0, false).split.count, 1);  // varlen / unaligned rows
  EXPECT_EQ(plan_bwd_dhu(128, 4, 128, 128, 132, 1, true).split.count, 1);   // 1: never
  EXPECT_EQ(plan_bwd_dhu(16, 2, 128, 128, 132, 0, true).split.count, 1);    // 16 chunks: not worth two launches
  EXPECT_EQ(plan_bwd_dhu(128, 32, 128, 128, 132, 5, true).split.count, 5);  // requested
  EXPECT_EQ(plan_bwd_dhu(128, 32, 128, 128, 132, 5, false).split.count, 1);
}

}  // namespace
}  // namespace attnkit::cuda::gdn
