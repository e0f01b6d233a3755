// src/cuda/gdn/chunk_fwd_plan.hpp — how many segments the sequence splits cut each sequence into
// (SegmentSplit, chunk_fwd_split.cuh): the chunked forward's, and bwd_dhu's over its reverse chain
// with the value block it runs (bwd_dhu_split.cuh). Host arithmetic only, so that the CPU tests
// check the choices (tests/cpp/gdn_segment_test.cpp).
#pragma once
#include <algorithm>
#include <cstdint>

namespace attnkit::cuda::gdn {

// count segments of `chunks` chunks each (the last may have fewer); count 1: no split.
struct SplitPlan {
  int count = 1, chunks = 0;
};

// A cost model in units of one output-mode chunk step of a recurrence CTA (one CTA an SM):
// unsplit, waves x chunks; split into S segments of L chunks, the first pass's waves x L x
// cost.end_step (no output: only the state's path), a stitch step per segment, two more launches,
// and the output pass's waves x L. Split when that is under 95% of unsplit. The forward's
// constants (kFwdSplitCosts) are measured on an H200 (docs/perf/gdn_chunk_fwd.md, v10): a kEnd chunk step ~0.68 of an output
// one, a stitch step ~3.5 us ~ 2 output steps. At B1 H16 T8192 (32 chains of 128 chunks on 132
// SMs) it picks 3 segments: 96 CTAs x 43 chunks in each pass; at 64 chains of 128 chunks or more,
// 2 (the 85% first used left those unsplit; split in two on an H200: inference forward -5%,
// training forward -20%, the backward's rerun -4.5% at B2 T8192 H16, forward -11% and backward -6%
// at B1 T32768 H32: docs/perf/gdn_chunk_bwd.md, "The rerun ... as the forward's sequence split").
//   nchunks: chunks a sequence; heads: sequences x value heads; v_blocks = V / 64; p_blocks =
//   K / 64 (P's virtual blocks); requested: GdnFwdParams::num_segments (0: the model decides).
// The step costs are arguments: bwd_dhu's chain has its own (kDhuSplitCosts).
struct SplitCosts {
  double end_step, stitch_step, launches;  // in units of one output-pass chunk step
};
constexpr SplitCosts kFwdSplitCosts{0.7, 2.0, 3.0};
inline SplitPlan plan_split(int64_t nchunks, int64_t heads, int64_t v_blocks, int64_t p_blocks, int sms, int requested,
                            SplitCosts cost = kFwdSplitCosts) {
  SplitPlan plan;
  const int64_t chains = heads * v_blocks;
  if (requested == 1 || nchunks < 2 || chains == 0) return plan;
  auto of = [&](int64_t segments) {
    SplitPlan s;
    s.chunks = static_cast<int>((nchunks + segments - 1) / segments);
    s.count = static_cast<int>((nchunks + s.chunks - 1) / s.chunks);
    return s;
  };
  if (requested > 1) return of(std::min<int64_t>(requested, nchunks));
  const int64_t slots = std::max(1, sms);
  auto waves = [&](int64_t ctas) { return static_cast<double>((ctas + slots - 1) / slots); };
  double best = 0.95 * waves(chains) * nchunks;
  for (int64_t segments = 2; segments <= 16 && segments <= nchunks; ++segments) {
    const SplitPlan s = of(segments);
    if (s.count < 2) continue;
    const int64_t end_ctas = heads * (v_blocks + (s.count - 2) * (v_blocks + p_blocks));
    const double t = waves(end_ctas) * s.chunks * cost.end_step + (s.count - 2) * cost.stitch_step + cost.launches +
                     waves(s.count * chains) * s.chunks;
    if (t < best) best = t, plan = s;
  }
  return plan;
}

// bwd_dhu's value block for `pairs` (sequence, value head) chains: the widest of 64, 32, 16
// columns whose CTAs leave at most half of the SMs idle (16 otherwise). Each CTA is a
// latency-bound chain of chunks, so narrower blocks on idle SMs shorten every chain (B1 T4096 H16
// on an H200: 128 CTAs of 16 columns 0.069 ms, 64 of 32 columns 0.075 ms); but two waves of narrow
// CTAs lose to one of wide ones (B1 H64: 32 columns in two waves 0.49 ms, 64 in one 0.40 ms;
// docs/perf/gdn_bwd_dhu.md).
inline int dhu_value_block(int64_t pairs, int64_t V, int sms) {
  for (int bv : {64, 32})
    if (pairs * (V / bv) * 2 > sms) return bv;
  return 16;
}

// bwd_dhu's split costs, in its own unsplit chunk steps (~0.86 us with few CTAs on an H200),
// fitted to forced counts 1-12 at B1 T8192 H4 (32 chains) and H1 (8 chains) within ~5%: a
// first-pass step as an output one (its saved stores are off the chain's path), a stitch step
// ~4.7 us, ~8 us for the two more launches and their pipeline fills (docs/perf/gdn_bwd_dhu.md,
// "bwd_dhu's own sequence split"). At H4 that picks 3 segments (0.112 -> 0.090 ms measured).
constexpr SplitCosts kDhuSplitCosts{1.0, 5.5, 9.0};

// What bwd_dhu runs: the value block, then (dense batches with 16-byte rows only: `splittable`)
// the split of its reverse chain, with DK / bv virtual blocks a (segment, chain) in the first pass.
struct DhuPlan {
  int bv = 64;
  SplitPlan split;
};
inline DhuPlan plan_bwd_dhu(int64_t nchunks, int64_t pairs, int64_t K, int64_t V, int sms, int requested, bool splittable) {
  DhuPlan plan;
  plan.bv = dhu_value_block(pairs, V, sms);
  if (splittable) plan.split = plan_split(nchunks, pairs, V / plan.bv, K / plan.bv, sms, requested, kDhuSplitCosts);
  return plan;
}

}  // namespace attnkit::cuda::gdn
