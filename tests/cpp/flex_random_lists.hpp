// tests/cpp/flex_random_lists.hpp — random BlockMask kv lists (partial and full, each row's blocks
// named in a random order) for the tests of the CUDA flex backward's query tile lists.
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "src/cuda/flex/block_lists.hpp"

namespace attnkit::cuda::flex {

struct RandomLists {
  int bm, hm, nq, nk, q_sub, m_tiles;
  std::vector<int> st;  // per (b, h, r, kb): 0 absent, 1 partial, 2 full
  std::vector<int32_t> num, idx, full_num, full_idx;  // [bm, hm, nq] counts, [bm, hm, nq, nk] indices (-1 unused)

  // Up to max_dim mask batches / heads, 1..max_blocks query and key blocks, 1..3 query tiles a
  // query block (the last block possibly short).
  RandomLists(std::mt19937& rng, int max_dim, int max_blocks) {
    std::uniform_int_distribution<int> dim(1, max_dim), blocks(1, max_blocks), state(0, 2), sub(1, 3), short_tail(0, 2);
    bm = dim(rng), hm = dim(rng), nq = blocks(rng), nk = blocks(rng), q_sub = sub(rng);
    m_tiles = nq * q_sub - (q_sub > 1 ? short_tail(rng) % q_sub : 0);
    st.resize(size_t(bm) * hm * nq * nk);
    for (int& s : st) s = state(rng);
    num.assign(size_t(bm) * hm * nq, 0);
    full_num.assign(num.size(), 0);
    idx.assign(st.size(), -1);
    full_idx.assign(st.size(), -1);
    std::vector<int> order(nk);
    for (size_t row = 0; row < num.size(); ++row) {
      for (int kb = 0; kb < nk; ++kb) order[kb] = kb;
      std::shuffle(order.begin(), order.end(), rng);
      for (int kb : order) {
        const int s = st[row * nk + kb];
        if (s == 1) idx[row * nk + num[row]++] = kb;
        if (s == 2) full_idx[row * nk + full_num[row]++] = kb;
      }
    }
  }

  // The lists as the kernels read them, at the given copies of num / idx / full_num / full_idx.
  BlockList list(const int32_t* n, const int32_t* i) const {
    BlockList l;
    l.num = n;
    l.index = i;
    l.num_stride[0] = int64_t(hm) * nq;
    l.num_stride[1] = nq;
    l.num_stride[2] = 1;
    l.index_stride[0] = int64_t(hm) * nq * nk;
    l.index_stride[1] = int64_t(nq) * nk;
    l.index_stride[2] = nk;
    l.index_stride[3] = 1;
    return l;
  }
  size_t columns() const { return size_t(bm) * hm * nk; }
};

}  // namespace attnkit::cuda::flex
