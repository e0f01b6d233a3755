// src/cuda/gdn/bwd_dhu_split.cuh — bwd_dhu's own sequence split, for too few (sequence, value
// head, value block) chains to fill the GPU (B1 H4 at 16 columns: 32 CTAs of 128 chunks).
//
// The reverse chain is affine in its start as the forward's is: over a run of chunks, dH entering
// the run's first chunk = A dH leaving its last + R, with A the product of the chunks'
// (e^G_last I - w^T diag(fk) K) and R what do and dv add. So the forward's scheme
// (chunk_fwd_split.cuh, SegmentSplit) carries over with the segments numbered from the end:
// segment 0 holds the last chunks and starts from dht.
//   1. kEnds over segments 0 .. count - 2, writing neither dh nor dv2: segment 0 from dht, the
//      others from 0, each writing its end (the dH the segment before it starts from, or R) into
//      starts[s + 1]; segments >= 1 also run DK / BV virtual blocks starting from the identity's
//      columns, with do = dv = 0 (their TMA boxes lie past V: zero-filled), whose end is A, into
//      prods[s].
//   2. The forward's stitch kernel as it is: starts[s + 1] += prods[s] starts[s], s = 1 .. count - 2.
//   3. kOutputs over every segment from starts[s] (segment 0: dht), with dh and dv2 as unsplit;
//      the last segment (the sequence's first chunks) writes dh0.
#pragma once
#include "src/cuda/gdn/bwd_dhu_args.cuh"
#include "src/cuda/gdn/chunk_fwd_split.cuh"

namespace attnkit::cuda::gdn {

// A bwd_dhu CTA's work (recurrence_item, segments from the end).
CUTE_DEVICE WorkItem dhu_item(const BwdDhuArgs& a, int item, const ItemDivisors& divisors) {
  return recurrence_item<true>(a, item, divisors);
}

// The sequence's chunk index of the segment's first chunk (dh's chunk axis).
CUTE_DEVICE int dhu_first_chunk(const BwdDhuArgs& a, const WorkItem& it) {
  return a.split.pass == SegmentSplit::kNone ? 0 : (a.split.count - 1 - it.seg) * a.split.chunks;
}

// A virtual block (the first pass's identity columns (vb - v_blocks) * BV ..).
CUTE_DEVICE bool dhu_virtual(const BwdDhuArgs& a, const WorkItem& it) { return it.vb >= a.v_blocks; }

// Where a real block's dH starts, indexed like dht (the caller adds its block's first column):
// dht (or 0 when absent) unsplit and for segment 0, the stitched start in the output pass, 0 in
// the first pass.
CUTE_DEVICE StateTensor dhu_start(const BwdDhuArgs& a, const WorkItem& it, int dk, int V) {
  const SegmentSplit& sp = a.split;
  if (sp.pass == SegmentSplit::kNone || it.seg == 0) return a.dht;
  if (sp.pass == SegmentSplit::kOutputs) return split_slot(a, sp.starts, it.seg, dk, V);
  return {};
}

// Where a CTA's final dH goes (EndState, fp32; ptr null: nowhere): dh0 unsplit and from the
// output pass's last segment; the first pass's ends and A (virtual blocks) into their slots.
CUTE_DEVICE EndState dhu_end(const BwdDhuArgs& a, const WorkItem& it, int dk, int bv) {
  const SegmentSplit& sp = a.split;
  const int V = a.v_blocks * bv;
  if (sp.pass == SegmentSplit::kEnds) {
    const bool virt = dhu_virtual(a, it);
    if (virt && it.seg == 0) return {};
    const StateTensor t = virt ? split_slot(a, sp.prods, it.seg, dk, dk) : split_slot(a, sp.starts, it.seg + 1, dk, V);
    float* base = static_cast<float*>(const_cast<void*>(t.data.ptr));
    const int col0 = (virt ? it.vb - a.v_blocks : it.vb) * bv;
    return EndState{base + it.n * t.sn + it.hv * t.sh + col0, t.sk, 1};
  }
  if (!a.dh0 || (sp.pass == SegmentSplit::kOutputs && it.seg != sp.count - 1)) return {};
  return EndState{a.dh0 + it.n * a.dh0_sn + it.hv * a.dh0_sh + int64_t(it.vb) * bv * a.dh0_sv, a.dh0_sk, a.dh0_sv};
}

}  // namespace attnkit::cuda::gdn
