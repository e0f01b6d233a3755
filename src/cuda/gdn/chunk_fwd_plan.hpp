// src/cuda/gdn/chunk_fwd_plan.hpp — how many segments the chunked forward's sequence split
// (SegmentSplit, chunk_fwd_split.cuh) cuts each sequence into: host arithmetic only, so that the
// CPU tests check the choice (tests/cpp/gdn_segment_test.cpp).
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
// kEndStep (no output: only the state's path), a stitch step per segment, two more launches,
// and the output pass's waves x L. Split when that is under 95% of unsplit. The constants are
// measured on an H200 (docs/perf/gdn_chunk_fwd.md, v10): a kEnd chunk step ~0.68 of an output
// one, a stitch step ~3.5 us ~ 2 output steps. At B1 H16 T8192 (32 chains of 128 chunks on 132
// SMs) it picks 3 segments: 96 CTAs x 43 chunks in each pass; at 64 chains of 128 chunks or more,
// 2 (the 85% first used left those unsplit; split in two on an H200: inference forward -5%,
// training forward -20%, the backward's rerun -4.5% at B2 T8192 H16, forward -11% and backward -6%
// at B1 T32768 H32: docs/perf/gdn_chunk_bwd.md, "The rerun ... as the forward's sequence split").
//   nchunks: chunks a sequence; heads: sequences x value heads; v_blocks = V / 64; p_blocks =
//   K / 64 (P's virtual blocks); requested: GdnFwdParams::num_segments (0: the model decides).
inline SplitPlan plan_split(int64_t nchunks, int64_t heads, int64_t v_blocks, int64_t p_blocks, int sms, int requested) {
  constexpr double kEndStep = 0.7, kStitchStep = 2.0, kLaunches = 3.0;
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
    const double t = waves(end_ctas) * s.chunks * kEndStep + (s.count - 2) * kStitchStep + kLaunches +
                     waves(s.count * chains) * s.chunks;
    if (t < best) best = t, plan = s;
  }
  return plan;
}

}  // namespace attnkit::cuda::gdn
