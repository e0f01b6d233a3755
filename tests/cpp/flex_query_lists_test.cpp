// tests/cpp/flex_query_lists_test.cpp — the CUDA flex backward's query tile lists
// (src/cuda/flex/block_lists.hpp), built on the CPU by the one-thread reference the kernels are
// checked against (flex_query_lists_gpu_test.cu), against a brute force over random BlockMasks:
// every key block lists exactly the query tiles of the query blocks whose kv lists name it, each
// flagged full or partial as its block is, last to first — in the ordered build (deterministic
// mode) partial and full alike, so that every key block visits query tiles in one order (the ordered
// dQ turns then form a wavefront), else the partial blocks' tiles first — and each entry's turn is
// the number of earlier key blocks that query block names (the deterministic dQ order relies on
// it; a wrong turn would deadlock).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "flex_random_lists.hpp"

namespace attnkit::cuda::flex {
namespace {

TEST(FlexQueryLists, MatchBruteForceOverRandomBlockMasks) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 1000; ++trial) {
    const RandomLists m(rng, 3, 9);
    const bool partial_first = trial % 2 == 0;
    const int bm = m.bm, hm = m.hm, nq = m.nq, nk = m.nk, q_sub = m.q_sub, m_tiles = m.m_tiles;
    const std::vector<int>& st = m.st;
    std::vector<int32_t> cells(st.size()), num(m.columns()), tiles(num.size() * m_tiles, -1), turns(num.size() * m_tiles, -1);
    ListBuildArgs x;
    x.partial = m.list(m.num.data(), m.idx.data());
    x.full = m.list(m.full_num.data(), m.full_idx.data());
    x.nq = nq;
    x.q_sub = q_sub;
    x.partial_first = partial_first;
    x.cells = cells.data();
    x.out = {num.data(), tiles.data(), turns.data(), bm, hm, nk, m_tiles};
    for (int64_t t = 0; t < int64_t(bm) * hm * nq; ++t) mark_query_block_row(x, t);
    for (int64_t t = 0; t < int64_t(bm) * hm * nk; ++t) gather_key_block_column(x, t);

    for (int b = 0; b < bm; ++b)
      for (int h = 0; h < hm; ++h)
        for (int kb = 0; kb < nk; ++kb) {
          SCOPED_TRACE("trial " + std::to_string(trial) + (partial_first ? " partial first" : " ordered") + " b " + std::to_string(b) + " h " + std::to_string(h) + " kb " +
                       std::to_string(kb));
          std::vector<int> want_tiles, want_full, want_turns;
          for (int group : partial_first ? std::vector<int>{1, 2} : std::vector<int>{0}) {
            for (int r = nq - 1; r >= 0; --r) {
              const size_t row = (size_t(b) * hm + h) * nq + r;
              const int cell = st[row * nk + kb];
              if (cell == 0 || (group != 0 && cell != group)) continue;
              int before = 0;
              for (int k = 0; k < kb; ++k) before += st[row * nk + k] != 0;
              for (int s = q_sub - 1; s >= 0; --s)
                if (r * q_sub + s < m_tiles) {
                  want_tiles.push_back(r * q_sub + s);
                  want_full.push_back(cell == 2);
                  want_turns.push_back(before);
                }
            }
          }
          const int64_t at = x.out.row(b, h, kb);
          ASSERT_EQ(num[at], static_cast<int>(want_tiles.size()));
          for (size_t i = 0; i < want_tiles.size(); ++i) {
            const int32_t e = tiles[at * m_tiles + i];
            ASSERT_EQ(QueryTileLists::query_tile_of(e), want_tiles[i]) << "entry " << i;
            ASSERT_EQ(QueryTileLists::is_full(e), want_full[i] != 0) << "entry " << i;
            ASSERT_EQ(turns[at * m_tiles + i], want_turns[i]) << "entry " << i;
          }
        }
  }
}

}  // namespace
}  // namespace attnkit::cuda::flex
