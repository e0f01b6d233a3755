// tests/cpp/flex_query_lists_gpu_test.cu — the kernels that build the CUDA flex backward's query
// tile lists (src/cuda/flex/bwd_lists.cuh: a block per query block row, a warp per key block
// column) against the one-thread reference of block_lists.hpp (itself checked against a brute
// force by flex_query_lists_test.cpp), over random BlockMasks: small ones, and ones past the
// kernels' chunk sizes (128 key blocks a row pass, 32 query block rows a warp pass). Outputs are
// poisoned before the build; every count and every listed entry (query tile, full flag, turn) must match.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "flex_random_lists.hpp"
#include "src/cuda/flex/bwd_lists.cuh"

namespace attnkit::cuda::flex {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct DeviceInts {  // a device copy of a host vector (or n poisoned ints)
  int32_t* ptr = nullptr;
  size_t n = 0;
  explicit DeviceInts(const std::vector<int32_t>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(int32_t)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, h.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit DeviceInts(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(int32_t)), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr, 0xff, n * sizeof(int32_t)), cudaSuccess);
  }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  ~DeviceInts() { cudaFree(ptr); }
  std::vector<int32_t> host() const {
    std::vector<int32_t> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

void check_trial(const RandomLists& m, bool partial_first, const std::string& what) {
  SCOPED_TRACE(what + (partial_first ? ", partial first" : ", ordered") + ": bm " + std::to_string(m.bm) + " hm " + std::to_string(m.hm) + " nq " + std::to_string(m.nq) + " nk " +
               std::to_string(m.nk) + " q_sub " + std::to_string(m.q_sub) + " m_tiles " + std::to_string(m.m_tiles));
  const size_t cols = m.columns();
  // The reference, on the CPU.
  std::vector<int32_t> cells(m.st.size()), num(cols), tiles(cols * m.m_tiles, -1), turns(tiles.size(), -1);
  ListBuildArgs x;
  x.partial = m.list(m.num.data(), m.idx.data());
  x.full = m.list(m.full_num.data(), m.full_idx.data());
  x.nq = m.nq;
  x.q_sub = m.q_sub;
  x.partial_first = partial_first;
  x.cells = cells.data();
  x.out = {num.data(), tiles.data(), turns.data(), m.bm, m.hm, m.nk, m.m_tiles};
  for (int64_t t = 0; t < int64_t(m.bm) * m.hm * m.nq; ++t) mark_query_block_row(x, t);
  for (int64_t t = 0; t < int64_t(cols); ++t) gather_key_block_column(x, t);
  // The kernels.
  DeviceInts d_num(m.num), d_idx(m.idx), d_full_num(m.full_num), d_full_idx(m.full_idx);
  DeviceInts d_cells(m.st.size()), d_out_num(cols), d_tiles(tiles.size()), d_turns(tiles.size());
  ListBuildArgs dx = x;
  dx.partial = m.list(d_num.ptr, d_idx.ptr);
  dx.full = m.list(d_full_num.ptr, d_full_idx.ptr);
  dx.cells = d_cells.ptr;
  dx.out = {d_out_num.ptr, d_tiles.ptr, d_turns.ptr, m.bm, m.hm, m.nk, m.m_tiles};
  ASSERT_EQ(build_query_tile_lists(dx, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int32_t> g_num = d_out_num.host(), g_tiles = d_tiles.host(), g_turns = d_turns.host();
  for (size_t c = 0; c < cols; ++c) {
    ASSERT_EQ(g_num[c], num[c]) << "column " << c;
    for (int i = 0; i < num[c]; ++i) {
      ASSERT_EQ(g_tiles[c * m.m_tiles + i], tiles[c * m.m_tiles + i]) << "column " << c << " entry " << i;
      ASSERT_EQ(g_turns[c * m.m_tiles + i], turns[c * m.m_tiles + i]) << "column " << c << " entry " << i;
    }
  }
}

TEST(FlexQueryListsGpu, KernelsMatchTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial)
    check_trial(RandomLists(rng, 3, 9), trial % 2 == 0, "small, trial " + std::to_string(trial));
  for (int trial = 0; trial < 24; ++trial)
    check_trial(RandomLists(rng, 2, 300), trial % 2 == 0, "large, trial " + std::to_string(trial));
}

}  // namespace
}  // namespace attnkit::cuda::flex
