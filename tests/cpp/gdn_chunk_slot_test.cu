// tests/cpp/gdn_chunk_slot_test.cu — the WY kernel's grid: wy_slot_count() slots, each mapped by
// ChunkSlot to (sequence, chunk) or to nothing. Host-only: over random varlen batches (empty and
// 1-token sequences, thousands of them) and dense ones, every chunk of every sequence gets exactly
// one slot and no live slot points past its sequence.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "src/cuda/gdn/chunk_fwd_args.cuh"

namespace attnkit::test {
namespace {

void expect_each_chunk_once(const std::vector<int64_t>& lens, bool varlen) {
  cuda::gdn::ChunkFwdArgs a;
  std::vector<int64_t> cu = {0};
  for (int64_t l : lens) cu.push_back(cu.back() + l);
  a.num_seqs = static_cast<int>(lens.size());
  a.tokens = varlen ? cu.back() : lens.at(0);
  if (varlen) a.cu_seqlens = cu.data();
  std::vector<std::vector<int>> hits(lens.size());
  for (size_t n = 0; n < lens.size(); ++n) hits[n].assign(static_cast<size_t>((lens[n] + 63) / 64), 0);
  const int64_t slots = cuda::gdn::wy_slot_count(a.tokens, a.num_seqs, varlen);
  int bad = 0;
  for (int64_t slot = 0; slot < slots; ++slot) {
    const cuda::gdn::ChunkSlot s(a, slot);
    if (!s.live) continue;
    if (s.n < 0 || s.n >= a.num_seqs || s.j < 0 || int64_t(s.j) * 64 >= lens[s.n]) {
      ++bad;
      continue;
    }
    ++hits[s.n][s.j];
  }
  EXPECT_EQ(bad, 0) << "live slots outside their sequence";
  int missed = 0, twice = 0;
  for (const auto& h : hits)
    for (int c : h) {
      missed += c == 0;
      twice += c > 1;
    }
  EXPECT_EQ(missed, 0) << "chunks without a slot";
  EXPECT_EQ(twice, 0) << "chunks with two slots";
}

TEST(GdnChunkSlots, VarlenEveryChunkExactlyOnce) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = trial < 20 ? 1 + trial : 500 + 100 * trial;
    std::uniform_int_distribution<int64_t> len(0, trial % 2 ? 3 : 300);
    std::vector<int64_t> lens(static_cast<size_t>(n));
    for (auto& l : lens) l = len(rng);
    SCOPED_TRACE("trial " + std::to_string(trial));
    expect_each_chunk_once(lens, true);
  }
  expect_each_chunk_once({0}, true);
  expect_each_chunk_once({64, 64, 1, 63, 65, 0, 128}, true);
}

TEST(GdnChunkSlots, DenseEveryChunkExactlyOnce) {
  for (int64_t T : {1, 63, 64, 65, 1000})
    for (int B : {1, 3}) expect_each_chunk_once(std::vector<int64_t>(static_cast<size_t>(B), T), false);
}

}  // namespace
}  // namespace attnkit::test
