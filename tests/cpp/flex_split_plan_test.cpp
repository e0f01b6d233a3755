// tests/cpp/flex_split_plan_test.cpp — the CUDA flex forward's short-query plan
// (src/cuda/flex/split_plan.hpp), host code: when a GQA group's queries are packed into one query
// tile (only where stacking them is a view of q, out and lse, every head of the group visits the
// same key blocks, and no rel_bias), and how many split-KV parts the auto rule then picks.
#include <gtest/gtest.h>

#include "src/cuda/flex/split_plan.hpp"

namespace attnkit::cuda::flex {
namespace {

// A [B, H, S, D] view with explicit strides (no data: the plan reads only shapes and strides).
TensorView view(std::initializer_list<int64_t> sizes, std::initializer_list<int64_t> strides) {
  TensorView t;
  t.device = Device::cuda(0);
  t.dtype = DType::kBFloat16;
  t.ndim = static_cast<int>(sizes.size());
  int d = 0;
  for (int64_t s : sizes) t.sizes[d++] = s;
  d = 0;
  for (int64_t s : strides) t.strides[d++] = s;
  return t;
}

TensorView contiguous(std::initializer_list<int64_t> sizes) {
  TensorView t = view(sizes, {});
  int64_t s = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = s;
    s *= t.sizes[d];
  }
  return t;
}

// q / out [B, Hq, Sq, 128], k / v [B, Hkv, Sk, 128], lse [B, Hq, Sq], all contiguous.
FlexFwdParams params(int64_t B, int64_t hq, int64_t hkv, int64_t sq, int64_t sk) {
  FlexFwdParams p;
  p.q = p.out = contiguous({B, hq, sq, 128});
  p.k = p.v = contiguous({B, hkv, sk, 128});
  p.lse = contiguous({B, hq, sq});
  p.lse.dtype = DType::kFloat32;
  return p;
}

TEST(FlexSplitPlan, PacksGqaGroupsThatFitOneQueryTile) {
  EXPECT_EQ(packed_query_heads(params(2, 32, 8, 1, 16384)), 4);
  EXPECT_EQ(packed_query_heads(params(2, 32, 8, 32, 4096)), 4);   // 128 rows: exactly one tile
  EXPECT_EQ(packed_query_heads(params(2, 32, 8, 33, 4096)), 1);   // 132 rows
  EXPECT_EQ(packed_query_heads(params(2, 16, 16, 1, 16384)), 1);  // MHA: nothing to pack
  EXPECT_EQ(packed_query_heads(params(1, 64, 1, 2, 4096)), 64);   // MQA
  EXPECT_EQ(packed_query_heads(params(1, 8, 3, 1, 4096)), 1);     // not a GQA shape (refused later)
}

TEST(FlexSplitPlan, PacksOnlyWhereStackingIsAView) {
  FlexFwdParams p = params(2, 8, 2, 4, 4096);
  p.q = view({2, 8, 4, 128}, {8 * 4 * 128, 128, 8 * 128, 1});  // BSHD memory: heads interleave the rows
  EXPECT_EQ(packed_query_heads(p), 1);
  p = params(2, 8, 2, 1, 4096);
  p.q = view({2, 8, 1, 128}, {8 * 128, 128, 999, 1});  // Sq = 1: the seq stride does not matter
  EXPECT_EQ(packed_query_heads(p), 4);
  p = params(2, 8, 2, 4, 4096);
  p.out = view({2, 8, 4, 128}, {8 * 4 * 128, 128, 8 * 128, 1});
  EXPECT_EQ(packed_query_heads(p), 1);
  p = params(2, 8, 2, 4, 4096);
  p.lse = view({2, 8, 4}, {32, 1, 8});  // lse [B, Sq, Hq] memory
  p.lse.dtype = DType::kFloat32;
  EXPECT_EQ(packed_query_heads(p), 1);
  p.lse = TensorView{};  // no lse
  EXPECT_EQ(packed_query_heads(p), 4);
}

TEST(FlexSplitPlan, PacksOnlyWithOneKeyListPerGroup) {
  FlexFwdParams p = params(2, 8, 2, 1, 4096);
  p.block_mask.kv_num_blocks = contiguous({2, 1, 1});  // broadcast over H
  p.block_mask.kv_indices = contiguous({2, 1, 1, 32});
  EXPECT_EQ(packed_query_heads(p), 4);
  p.block_mask.full_kv_num_blocks = contiguous({2, 8, 1});  // per-head full blocks
  p.block_mask.full_kv_indices = contiguous({2, 8, 1, 32});
  EXPECT_EQ(packed_query_heads(p), 1);
  p = params(2, 8, 2, 1, 4096);
  p.block_mask.kv_num_blocks = contiguous({1, 8, 1});
  p.block_mask.kv_indices = contiguous({1, 8, 1, 32});
  EXPECT_EQ(packed_query_heads(p), 1);
  p = params(2, 8, 2, 1, 4096);
  p.mods.rel_bias = contiguous({8, 2 * 4096 - 1});
  EXPECT_EQ(packed_query_heads(p), 1);
  p.mods.rel_bias = TensorView{};
  p.mods.alibi_slopes = contiguous({8});  // per-head mods are fine: each row knows its head
  EXPECT_EQ(packed_query_heads(p), 4);
}

// The packed forward's row split (row -> head j, query i) is a multiply-high, not a division.
TEST(FlexSplitPlan, RowDividerMatchesIntegerDivision) {
  for (int d = 1; d <= 128; ++d) {
    const RowDivider div = RowDivider::of(d);
    for (int n = 0; n < (1 << 16); ++n) ASSERT_EQ(div.divide(n), n / d) << n << " / " << d;
    for (int n : {(1 << 30) - 1, (1 << 30), INT32_MAX - 1}) ASSERT_EQ(div.divide(n), n / d) << n << " / " << d;
  }
  const RowDivider none;  // no packing: every row index (sequences below 2^30) gives 0
  for (int n : {0, 1, 127, 1 << 20, (1 << 30) - 1}) EXPECT_EQ(none.divide(n), 0) << n;
}

// Auto split count: enough parts for B * Hkv packed tiles (not B * Hq) to cover the SMs.
TEST(FlexSplitPlan, AutoSplitCountsPackedTiles) {
  const FlexFwdParams gqa = params(8, 32, 8, 1, 16384);  // 64 packed tiles, 128 key tiles each
  EXPECT_EQ(plan_splits(gqa, 132).splits, 3);
  EXPECT_EQ(plan_splits(gqa, 132, /*pack_gqa=*/false).splits, 1);  // your own functors: 256 tiles
  const FlexFwdParams mha = params(8, 32, 32, 1, 16384);  // 256 tiles: no split
  EXPECT_EQ(plan_splits(mha, 132).splits, 1);
  const SplitPlan plan = plan_splits(gqa, 132);
  EXPECT_EQ(plan.partial_lse_offset - plan.partial_out_offset, size_t(3) * 8 * 32 * 1 * 128 * sizeof(float));
}

}  // namespace
}  // namespace attnkit::cuda::flex
