// tests/cpp/bwd_ranges_test.cpp — the tile ranges the CUDA backward iterates (bwd_ranges.hpp),
// checked exhaustively against the mask rule on the CPU: every visible (query, key) pair lies in
// a visited (query tile, key tile), and the key tiles visiting a query tile are one range starting
// at first_key_tile() (the deterministic dQ order relies on it; a wrong turn would deadlock), their
// number (key_tiles_meeting), and each key tile's turn in its chain of ordered dQ adds
// (dq_turn_in_chain); and the per-score bounds of the backward's masked tiles (score_bounds).
#include <gtest/gtest.h>

#include <random>

#include "src/cuda/attention/bwd_ranges.hpp"

namespace attnkit {
namespace {

TEST(BwdTileRanges, CoverEveryVisiblePairAndKeyTilesAreOneRange) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> len(0, 700), win(-1, 300), pick(0, 3);
  constexpr int BM = 64;
  for (int trial = 0; trial < 3000; ++trial) {
    const int BN = trial % 2 ? 128 : 64;  // key tiles of D <= 128, of D 256
    const int sq = len(rng), sk = len(rng);
    MaskOptions o;
    o.causal = pick(rng) == 0;
    o.align = pick(rng) % 2 ? CausalAlign::kTopLeft : CausalAlign::kBottomRight;
    o.window_left = pick(rng) < 2 ? win(rng) : -1;
    o.window_right = pick(rng) == 0 ? win(rng) : -1;
    const auto rule = MaskRuleT<int>::make(o, sq, sk);
    SCOPED_TRACE("BN " + std::to_string(BN) + " sq " + std::to_string(sq) + " sk " + std::to_string(sk) + " causal " + std::to_string(o.causal) + " left " +
                 std::to_string(o.window_left) + " right " + std::to_string(o.window_right));
    const int n_tiles = (sk + BN - 1) / BN, m_tiles = (sq + BM - 1) / BM;
    std::vector<std::vector<bool>> visits(m_tiles, std::vector<bool>(n_tiles, false));
    for (int n = 0; n < n_tiles; ++n) {
      const cuda::QueryRange r(rule, sq, n, BM, BN);
      for (int m = r.m_begin; m < r.m_end; ++m) {
        ASSERT_TRUE(m >= 0 && m < m_tiles) << "key tile " << n << " visits query tile " << m;
        visits[m][n] = true;
      }
    }
    for (int i = 0; i < sq; ++i)
      for (int j = 0; j < sk; ++j)
        if (rule.visible(i, j)) ASSERT_TRUE(visits[i / BM][j / BN]) << "pair (" << i << ", " << j << ") not visited";
    for (int m = 0; m < m_tiles; ++m) {
      int first = -1, last = -1;
      for (int n = 0; n < n_tiles; ++n)
        if (visits[m][n]) {
          if (first < 0) first = n;
          ASSERT_TRUE(last < 0 || last == n - 1) << "query tile " << m << ": key tiles not contiguous at " << n;
          last = n;
        }
      if (first >= 0) EXPECT_EQ(cuda::first_key_tile(rule, m, BM, BN), first) << "query tile " << m;
      EXPECT_EQ(cuda::key_tiles_meeting(rule, sq, m, BM, BN), first < 0 ? 0 : last - first + 1) << "query tile " << m;
      // Each visiting key tile's turn in its chain: the visiting key tiles of that chain before it.
      for (int chains = 1; chains <= 3; ++chains) {
        std::vector<int> landed(chains, 0);
        for (int n = 0; n < n_tiles; ++n)
          if (visits[m][n]) {
            EXPECT_EQ(cuda::dq_turn_in_chain(rule, m, n, BM, BN, chains), landed[n % chains])
                << "query tile " << m << " key tile " << n << " chains " << chains;
            ++landed[n % chains];
          }
      }
    }
  }
}

// score_bounds from the first score (key, row) of a 16 x 64 patch (a warp's keys, a warpgroup's
// queries), against the rule itself for every score of the patch, over random rules (both
// alignments, windows, causal) and lengths, with the patch reaching past the keys' and rows' ends.
TEST(BwdTileRanges, ScoreBoundsAreTheMaskRule) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> len(1, 300), win(-1, 40), pick(0, 3);
  for (int trial = 0; trial < 400; ++trial) {
    const int sq = len(rng), sk = len(rng);
    MaskOptions o;
    o.causal = pick(rng) < 2;
    o.align = pick(rng) % 2 ? CausalAlign::kTopLeft : CausalAlign::kBottomRight;
    o.window_left = pick(rng) < 2 ? win(rng) : -1;
    o.window_right = pick(rng) == 0 ? win(rng) : -1;
    const auto rule = MaskRuleT<int>::make(o, sq, sk);
    std::uniform_int_distribution<int> key0(0, sk + 8), row0(0, sq + 8);
    for (int patch = 0; patch < 20; ++patch) {
      const int k = key0(rng), r = row0(rng);
      const cuda::ScoreBounds b = cuda::score_bounds(rule, k, r);
      for (int dk = 0; dk < 16; ++dk)
        for (int dc = 0; dc < 64; ++dc) {
          const bool expect = k + dk < sk && k + dk >= rule.lo(r + dc) && k + dk <= rule.hi(r + dc);
          const bool got = dk < b.kmax && dc - dk >= b.dlo && dc - dk <= b.dhi;
          ASSERT_EQ(got, expect) << "sq " << sq << " sk " << sk << " causal " << o.causal << " left " << o.window_left
                                 << " right " << o.window_right << " key " << k + dk << " row " << r + dc;
        }
    }
  }
}

}  // namespace
}  // namespace attnkit
