// src/cuda/flex/split_plan.hpp — the short-query (decode) path of the CUDA flex forward: how many
// ways each query tile's key tiles are split, and where the partial results live in the
// workspace. Host code without CUDA: the workspace query (src/api/ops.cpp) uses it too.
//
// With Sq <= 64 a (batch, head) is one query tile: B * Hq tiles cannot fill the GPU when the keys
// are many. Split-KV runs each tile's key list in `splits` contiguous parts on separate CTAs, each
// writing its normalised fp32 output and LSE; a combine kernel merges them (out = sum over parts of
// exp(lse_p - lse) * out_p, lse = logsumexp(lse_p)).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "attnkit/config.hpp"
#include "attnkit/flex.hpp"

namespace attnkit::cuda::flex {

inline constexpr int64_t kMaxSplitQueries = 64;  // the short-query path: Sq <= 64
inline constexpr int kMaxSplits = 64;

// The forward kernel's key tile width at head dim d and its query tile height (checked against
// FwdTraits in fwd_setup.cuh).
inline constexpr int key_tile_width_of(int64_t d) { return d <= 128 ? 128 : 64; }
inline constexpr int64_t kQueryTileRows = 128;

// n / d for 0 <= n < 2^31 as a multiply-high, an add and a shift (the round-up method: shift =
// ceil(log2 d), mul = 2^32 (2^shift - d) / d + 1). The packed forward splits every row index by
// Sq with it once per row per score pass (a runtime division is ~20 instructions, one of them on
// the MUFU pipe the exponentials need). The default divisor (2^31 - 1) gives 0 for every row.
struct RowDivider {
  uint32_t mul = 3;
  int shift = 31;
  static RowDivider of(int64_t d) {
    RowDivider r;
    r.shift = 0;
    while ((int64_t(1) << r.shift) < d) ++r.shift;
    r.mul = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << r.shift) - d)) / d + 1);
    return r;
  }
  ATTNKIT_HD int divide(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
    return static_cast<int>((static_cast<uint32_t>((uint64_t(u) * mul) >> 32) + u) >> shift);
  }
};

// GQA packing: with g = Hq / Hkv > 1 query heads per KV head and g * Sq <= kQueryTileRows, the
// group's queries are stacked along one query tile's rows (row j * Sq + i: head g * hkv + j,
// query i), so each KV head's keys are read once instead of g times and the tile's rows are not
// mostly empty. Returns g, or 1 where packing does not apply. It needs stacking to be a view of
// q, out and lse (head stride = Sq * seq stride, or Sq = 1), one key list for all heads of a
// group (no BlockMask, or one broadcast over H), and no rel_bias (its band pass takes one head per
// tile).
inline int packed_query_heads(const FlexFwdParams& p) {
  const int64_t hq = p.q.size(1), hkv = p.k.size(1), sq = p.q.size(2);
  if (hkv <= 0 || hq <= hkv || hq % hkv != 0 || sq <= 0 || hq / hkv * sq > kQueryTileRows) return 1;
  const auto stackable = [sq](const TensorView& t) { return sq == 1 || t.stride(1) == sq * t.stride(2); };
  if (!stackable(p.q) || !stackable(p.out) || (p.lse.defined() && !stackable(p.lse))) return 1;
  const BlockMaskView& m = p.block_mask;
  const auto per_head = [](const TensorView& t) { return t.defined() && t.size(1) != 1; };
  if (m.defined() && (per_head(m.kv_num_blocks) || per_head(m.kv_indices) || per_head(m.full_kv_num_blocks) ||
                      per_head(m.full_kv_indices)))
    return 1;
  if (p.mods.rel_bias.defined()) return 1;
  return static_cast<int>(hq / hkv);
}

struct SplitPlan {
  int splits = 1;
  size_t partial_out_offset = 0;  // fp32 [splits, B, Hq, Sq, Dv]
  size_t partial_lse_offset = 0;  // fp32 [splits, B, Hq, Sq]
  size_t workspace_bytes = 16;    // the tile counter, then (when split) the partials
};

// p.num_splits: 0 chooses (enough CTAs to cover the GPU once, at least 4 key tiles per part; one
// query tile per (batch, KV head) when GQA packing applies and pack_gqa allows it — the catalog;
// your own functors' instantiations do not pack, and the workspace sized with packing is the
// larger one),
// 1 turns the split off, n > 1 asks for n (at most one part per key tile, at most kMaxSplits).
inline SplitPlan plan_splits(const FlexFwdParams& p, int num_sms, bool pack_gqa = true) {
  SplitPlan plan;
  const int64_t B = p.q.size(0), Hq = p.q.size(1), Sq = p.q.size(2), Sk = p.k.size(2), D = p.q.size(3);
  const int64_t key_tiles = (Sk + key_tile_width_of(D) - 1) / key_tile_width_of(D);
  if (Sq > kMaxSplitQueries || Sq == 0 || p.num_splits == 1 || key_tiles < 2) return plan;
  int64_t splits = p.num_splits;
  if (splits == 0) {
    const int64_t tiles = std::max<int64_t>(B * Hq / (pack_gqa ? packed_query_heads(p) : 1), 1);
    splits = std::min<int64_t>((num_sms + tiles - 1) / tiles, key_tiles / 4);
  }
  splits = std::clamp<int64_t>(std::min<int64_t>(splits, key_tiles), 1, kMaxSplits);
  if (splits < 2) return plan;
  const auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  const size_t rows = static_cast<size_t>(splits * B * Hq * Sq);
  plan.splits = static_cast<int>(splits);
  plan.partial_out_offset = 256;
  plan.partial_lse_offset = align(plan.partial_out_offset + rows * p.v.size(3) * sizeof(float));
  plan.workspace_bytes = plan.partial_lse_offset + rows * sizeof(float);
  return plan;
}

}  // namespace attnkit::cuda::flex
