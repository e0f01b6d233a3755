// tests/cpp/launch_order_test.cpp — the order in which the CUDA attention kernels start their tiles
// (launch_order.hpp). Backward: every (key tile, head, sequence) exactly once, a pair's key tiles in
// ascending order (the ordered dQ adds wait on lower key tiles only: a later one first would
// deadlock), each group's key tile n before its key tile n + 1. Forward: every (query tile, head,
// sequence) once, each group's query tiles last to first; flex's short tail. The rules' choice of
// group size and of the preprocess beside the backward; and the backward workspace's refusal of
// shapes whose rows overflow the kernels' 32-bit row index.
#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <vector>

#include "src/cuda/attention/launch_order.hpp"
#include "src/cuda/attention/bwd_workspace.hpp"

namespace attnkit {
namespace {

using cuda::bwd_cta_at;
using cuda::bwd_grid;
using cuda::fwd_tile_at;
using cuda::head_group_log2;

TEST(LaunchOrder, BackwardEveryCtaOnceAndEachPairsKeyTilesAscending) {
  for (int tiles : {1, 3, 16, 64})
    for (int heads : {1, 2, 6, 16})
      for (int batch : {1, 3, 4})
        for (int lg = 0; lg < 5; ++lg) {
          if (heads % (1 << lg) != 0) continue;
          SCOPED_TRACE(std::to_string(tiles) + " tiles, " + std::to_string(heads) + " heads, " + std::to_string(batch) + " seqs, lg " +
                       std::to_string(lg));
          const auto g = bwd_grid(tiles, heads, batch, lg);
          std::set<std::tuple<int, int, int>> seen;
          std::vector<int> last_tile(heads * batch, -1);     // per (head, sequence): the key tile started last
          std::vector<int> group_tile(heads * batch >> lg, 0);  // per group: the highest key tile started
          for (unsigned z = 0; z < g.z; ++z)  // launch order: x fastest
            for (unsigned y = 0; y < g.y; ++y)
              for (unsigned x = 0; x < g.x; ++x) {
                const auto c = bwd_cta_at(x, y, z, lg);
                ASSERT_TRUE(c.n_block >= 0 && c.n_block < tiles && c.head >= 0 && c.head < heads && c.batch >= 0 && c.batch < batch);
                ASSERT_TRUE(seen.insert({c.n_block, c.head, c.batch}).second) << "a CTA twice at " << x << " " << y << " " << z;
                const int pair = c.head + heads * c.batch;
                EXPECT_EQ(c.n_block, last_tile[pair] + 1) << "a pair's key tiles out of order";
                last_tile[pair] = c.n_block;
                // In a group, key tile n + 1 starts only after key tile n of every head of the group.
                const int group = pair >> lg;
                EXPECT_TRUE(c.n_block == group_tile[group] || c.n_block == group_tile[group] + 1);
                if (c.n_block == group_tile[group] + 1) EXPECT_EQ(c.head % (1 << lg), 0) << "key tile " << c.n_block << " began mid-group";
                group_tile[group] = c.n_block;
                if (lg == 0) EXPECT_TRUE(c.n_block == int(x) && c.head == int(y) && c.batch == int(z));
              }
          EXPECT_EQ(seen.size(), size_t(tiles) * heads * batch);
        }
}

TEST(LaunchOrder, ForwardEveryTileOnceLastQueryTilesFirstInEachGroup) {
  for (int m_blocks : {1, 3, 16})
    for (int heads : {1, 2, 6, 16})
      for (int batch : {1, 3})
        for (int lg = 0; lg < 5; ++lg) {
          if (heads % (1 << lg) != 0) continue;
          SCOPED_TRACE(std::to_string(m_blocks) + " query tiles, " + std::to_string(heads) + " heads, " + std::to_string(batch) + " seqs, lg " +
                       std::to_string(lg));
          std::set<std::tuple<int, int, int>> seen;
          std::vector<int> last_m(heads * batch, m_blocks);  // per (head, sequence): the query tile taken last
          for (int tile = 0; tile < m_blocks * heads * batch; ++tile) {
            const auto t = fwd_tile_at(tile, m_blocks, heads, lg);
            ASSERT_TRUE(t.m_block >= 0 && t.m_block < m_blocks && t.head >= 0 && t.head < heads && t.batch >= 0 && t.batch < batch);
            ASSERT_TRUE(seen.insert({t.m_block, t.head, t.batch}).second) << "a tile twice at " << tile;
            const int pair = t.head + heads * t.batch;
            EXPECT_EQ(t.m_block, last_m[pair] - 1) << "a head's query tiles out of order at " << tile;
            last_m[pair] = t.m_block;
            // Tiles come in runs of G heads with the same query tile, heads ascending.
            EXPECT_EQ(t.head % (1 << lg), tile % (1 << lg));
            if (lg == 0) {
              EXPECT_EQ(t.m_block, m_blocks - 1 - tile % m_blocks);
              EXPECT_EQ(t.head, tile / m_blocks % heads);
              EXPECT_EQ(t.batch, tile / m_blocks / heads);
            }
          }
          EXPECT_EQ(seen.size(), size_t(m_blocks) * heads * batch);
        }
}

TEST(LaunchOrder, FlexShortTailEveryTileOnceAndItsTailAcrossHeads) {
  for (int m_blocks : {1, 3, 16, 128})
    for (int heads : {1, 3, 16})
      for (int batch : {1, 2})
        for (int tail = 0; tail <= m_blocks; tail += (m_blocks > 16 ? 17 : 1)) {
          SCOPED_TRACE(std::to_string(m_blocks) + " query tiles, " + std::to_string(heads) + " heads, " + std::to_string(batch) +
                       " seqs, tail " + std::to_string(tail));
          std::set<std::tuple<int, int, int>> seen;
          std::vector<int> last_m(heads * batch, m_blocks);
          for (int tile = 0; tile < m_blocks * heads * batch; ++tile) {
            const auto t = cuda::fwd_tile_at_short_tail(tile, m_blocks, heads, tail);
            ASSERT_TRUE(t.m_block >= 0 && t.m_block < m_blocks && t.head >= 0 && t.head < heads && t.batch >= 0 && t.batch < batch);
            ASSERT_TRUE(seen.insert({t.m_block, t.head, t.batch}).second) << "a tile twice at " << tile;
            const int pair = t.head + heads * t.batch;
            EXPECT_EQ(t.m_block, last_m[pair] - 1) << "a head's query tiles out of order at " << tile;
            last_m[pair] = t.m_block;
            const int in_seq = tile % (m_blocks * heads);
            EXPECT_EQ(t.batch, tile / (m_blocks * heads));
            if (in_seq >= (m_blocks - tail) * heads) {  // the tail: m descending, heads fastest
              EXPECT_EQ(t.head, in_seq % heads);
              EXPECT_LT(t.m_block, tail);
            } else {
              EXPECT_GE(t.m_block, tail);
            }
            if (tail == 0) {
              const auto plain = fwd_tile_at(tile, m_blocks, heads, 0);
              EXPECT_TRUE(t.m_block == plain.m_block && t.head == plain.head && t.batch == plain.batch);
            }
          }
          EXPECT_EQ(seen.size(), size_t(m_blocks) * heads * batch);
        }
  // Two waves of tiles at the end of each sequence, at most the whole sequence.
  EXPECT_EQ(cuda::short_tail_m_blocks(128, 16, 132), 17);
  EXPECT_EQ(cuda::short_tail_m_blocks(128, 32, 132), 9);
  EXPECT_EQ(cuda::short_tail_m_blocks(8, 16, 132), 8);
  EXPECT_EQ(cuda::short_tail_m_blocks(128, 1, 132), 128);
}

// Flex's deterministic backward under a document mask: one group of the largest power of two
// dividing the heads (bwd_grid then has a single row of groups when the heads are a power of two).
TEST(LaunchOrder, DeterministicDocumentsGroupAllHeads) {
  EXPECT_EQ(cuda::all_heads_group_log2(16), 4);
  EXPECT_EQ(cuda::all_heads_group_log2(12), 2);
  EXPECT_EQ(cuda::all_heads_group_log2(9), 0);
  EXPECT_EQ(cuda::all_heads_group_log2(0), 0);
  const auto g = bwd_grid(128, 16, 1, cuda::all_heads_group_log2(16));
  EXPECT_TRUE(g.x == 128 * 16 && g.y == 1 && g.z == 1);
}

TEST(LaunchOrder, GroupsOnlyWhereTheMaskVariesTheWork) {
  MaskOptions causal_mask;
  causal_mask.causal = true;
  MaskOptions window_mask;
  window_mask.window_left = 256;
  EXPECT_TRUE(cuda::mask_varies_work(causal_mask));
  EXPECT_TRUE(cuda::mask_varies_work(window_mask));
  EXPECT_FALSE(cuda::mask_varies_work(MaskOptions{}));
  const bool causal = true, window = true, none = false;
  // The bench's shapes (B*S = 16k, 132 SMs): G * key tiles <= 132, G divides the heads.
  EXPECT_EQ(head_group_log2(causal, 16, 16, 132), 3);   // D128 S2k: 8 heads a group
  EXPECT_EQ(head_group_log2(causal, 64, 16, 132), 1);   // S8k: 2
  EXPECT_EQ(head_group_log2(causal, 128, 16, 132), 0);  // S16k: plain
  EXPECT_EQ(head_group_log2(causal, 4, 16, 132), 4);    // S512: all 16
  EXPECT_EQ(head_group_log2(causal, 4, 32, 132), 5);    // D64 S512: 32
  EXPECT_EQ(head_group_log2(window, 16, 16, 132), 3);
  EXPECT_EQ(head_group_log2(none, 16, 16, 132), 0);     // equal work: plain
  EXPECT_EQ(head_group_log2(causal, 16, 12, 132), 2);   // 12 heads: groups of 4 divide them
  EXPECT_EQ(head_group_log2(causal, 16, 9, 132), 0);    // odd: no whole group of 2
  EXPECT_EQ(head_group_log2(causal, 200, 64, 132), 0);  // a head's key tiles exceed a wave
  EXPECT_EQ(head_group_log2(causal, 0, 64, 132), 0);
  const auto g = bwd_grid(16, 16, 8, 3);
  EXPECT_TRUE(g.x == 128 && g.y == 2 && g.z == 8);
}

// The preprocess beside the main kernel: only where dq_accum is zeroed and past 512 keys (shorter
// sequences outrun it on its eighth of the SMs); with work that differs per tile, on an H200 up to
// 2048 keys.
TEST(BwdRules, PreprocessBesideOnlyPastShortSequences) {
  const bool zeroed = true, differs = true, fast = true;
  EXPECT_EQ(cuda::preprocess_sms_rule(132, !zeroed, !differs, 4096, fast), 0);
  EXPECT_EQ(cuda::preprocess_sms_rule(132, zeroed, !differs, 256, fast), 0);
  EXPECT_EQ(cuda::preprocess_sms_rule(132, zeroed, !differs, 512, fast), 0);
  EXPECT_EQ(cuda::preprocess_sms_rule(132, zeroed, !differs, 1024, fast), 132 / 8);
  EXPECT_EQ(cuda::preprocess_sms_rule(132, zeroed, differs, 1024, fast), 132 / 4);
  EXPECT_EQ(cuda::preprocess_sms_rule(132, zeroed, differs, 4096, fast), 0);
  EXPECT_EQ(cuda::preprocess_sms_rule(132, zeroed, differs, 1024, !fast), 0);
}

TEST(BwdWorkspace, RowsPast32BitsAreRefused) {
  cuda::BwdShape s;
  s.batch = 1;
  s.heads_q = s.heads_kv = 32;
  s.head_dim = 128;
  s.sq = s.sk = (int64_t(1) << 26) - 64;  // 32 heads x 2^26 - 64 rows: just under 2^31
  EXPECT_TRUE(cuda::BwdWorkspace(s).fits_32_bits());
  s.sq = s.sk = int64_t(1) << 26;  // exactly 2^31 rows
  const cuda::BwdWorkspace ws(s);
  EXPECT_FALSE(ws.fits_32_bits());
  EXPECT_NE(cuda::too_many_rows_message(ws, "the CUDA backward").find("2147483648"), std::string::npos);
  s.varlen = true;  // varlen pads each of the batch's sequences
  s.batch = 3;
  s.sq = (int64_t(1) << 26) - 4 * 64;
  EXPECT_TRUE(cuda::BwdWorkspace(s).fits_32_bits());
  s.sq += 2 * 64;
  EXPECT_FALSE(cuda::BwdWorkspace(s).fits_32_bits());
}

}  // namespace
}  // namespace attnkit
