// tests/cpp/flex_query_lists_test.cpp — the CUDA flex backward's query tile lists
// (src/cuda/flex/block_lists.hpp), built on the CPU by the same per-thread code the kernels run,
// against a brute force over random BlockMasks: every key block lists exactly the query tiles of
// the query blocks whose kv lists name it — partial ones first, each group last to first — and
// each entry's turn is the number of earlier key blocks that query block names (the deterministic
// dQ order relies on it; a wrong turn would deadlock).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "src/cuda/flex/block_lists.hpp"

namespace attnkit::cuda::flex {
namespace {

struct Mask {  // [bm, hm, nq] counts and [bm, hm, nq, nk] indices, partial and full
  std::vector<int32_t> num, idx, full_num, full_idx;
};

BlockList list_of(const std::vector<int32_t>& num, const std::vector<int32_t>& idx, int hm, int nq, int nk) {
  BlockList l;
  l.num = num.data();
  l.index = idx.data();
  l.num_stride[0] = int64_t(hm) * nq;
  l.num_stride[1] = nq;
  l.num_stride[2] = 1;
  l.index_stride[0] = int64_t(hm) * nq * nk;
  l.index_stride[1] = int64_t(nq) * nk;
  l.index_stride[2] = nk;
  l.index_stride[3] = 1;
  return l;
}

TEST(FlexQueryLists, MatchBruteForceOverRandomBlockMasks) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dim(1, 3), blocks(1, 9), state(0, 2), sub(1, 3), short_tail(0, 2);
  for (int trial = 0; trial < 500; ++trial) {
    const int bm = dim(rng), hm = dim(rng), nq = blocks(rng), nk = blocks(rng), q_sub = sub(rng);
    const int m_tiles = nq * q_sub - (q_sub > 1 ? short_tail(rng) % q_sub : 0);  // the last query block may be short
    // block state per (b, h, r, kb): 0 absent, 1 partial, 2 full; listed in a random order.
    std::vector<int> st(size_t(bm) * hm * nq * nk);
    for (int& s : st) s = state(rng);
    Mask m{std::vector<int32_t>(size_t(bm) * hm * nq), std::vector<int32_t>(st.size(), -1),
           std::vector<int32_t>(size_t(bm) * hm * nq), std::vector<int32_t>(st.size(), -1)};
    for (size_t row = 0; row < m.num.size(); ++row) {
      std::vector<int> order(nk);
      for (int kb = 0; kb < nk; ++kb) order[kb] = kb;
      std::shuffle(order.begin(), order.end(), rng);
      for (int kb : order) {
        const int s = st[row * nk + kb];
        if (s == 1) m.idx[row * nk + m.num[row]++] = kb;
        if (s == 2) m.full_idx[row * nk + m.full_num[row]++] = kb;
      }
    }
    std::vector<int32_t> cells(st.size()), num(size_t(bm) * hm * nk), num_partial(num.size()),
        tiles(num.size() * m_tiles, -1), turns(num.size() * m_tiles, -1);
    ListBuildArgs x;
    x.partial = list_of(m.num, m.idx, hm, nq, nk);
    x.full = list_of(m.full_num, m.full_idx, hm, nq, nk);
    x.nq = nq;
    x.q_sub = q_sub;
    x.cells = cells.data();
    x.out = {num.data(), num_partial.data(), tiles.data(), turns.data(), bm, hm, nk, m_tiles};
    for (int64_t t = 0; t < int64_t(bm) * hm * nq; ++t) mark_query_block_row(x, t);
    for (int64_t t = 0; t < int64_t(bm) * hm * nk; ++t) gather_key_block_column(x, t);

    for (int b = 0; b < bm; ++b)
      for (int h = 0; h < hm; ++h)
        for (int kb = 0; kb < nk; ++kb) {
          SCOPED_TRACE("trial " + std::to_string(trial) + " b " + std::to_string(b) + " h " + std::to_string(h) + " kb " +
                       std::to_string(kb));
          std::vector<int> want_tiles, want_turns;
          int want_partial = 0;
          for (int which = 1; which <= 2; ++which) {
            if (which == 2) want_partial = static_cast<int>(want_tiles.size());
            for (int r = nq - 1; r >= 0; --r) {
              const size_t row = (size_t(b) * hm + h) * nq + r;
              if (st[row * nk + kb] != which) continue;
              int before = 0;
              for (int k = 0; k < kb; ++k) before += st[row * nk + k] != 0;
              for (int s = q_sub - 1; s >= 0; --s)
                if (r * q_sub + s < m_tiles) {
                  want_tiles.push_back(r * q_sub + s);
                  want_turns.push_back(before);
                }
            }
          }
          const int64_t at = x.out.row(b, h, kb);
          ASSERT_EQ(num[at], static_cast<int>(want_tiles.size()));
          ASSERT_EQ(num_partial[at], want_partial);
          for (size_t i = 0; i < want_tiles.size(); ++i) {
            ASSERT_EQ(tiles[at * m_tiles + i], want_tiles[i]) << "entry " << i;
            ASSERT_EQ(turns[at * m_tiles + i], want_turns[i]) << "entry " << i;
          }
        }
  }
}

}  // namespace
}  // namespace attnkit::cuda::flex
