// src/cuda/gdn/item_walk.cuh — a persistent chain CTA's walk over its work items (the recurrence
// and bwd_dhu kernels: one item = a (sequence, value head, value block) chain of chunks).
//
// Why persistent: a packed batch of short sequences (issue 6's varlen case, ~7 chunks an item)
// launched a CTA an item paid each CTA's start and end — the first stages' loads, the last
// stores — once an item, with one CTA an SM and nothing beside it to hide them (~7 us an item,
// docs/perf/gdn_bwd_dhu.md). A CTA now takes items blockIdx.x, blockIdx.x + gridDim.x, ... below
// `items`, and its loader's pipeline runs over all of their chunks as one sequence of steps: the
// next item's first chunks load while the current item's last ones run.
// Step g of the CTA (stage g % stages, barrier phase (g / stages) % 2) is step `i` of item `it`.
// Items without chunks (empty sequences) have no steps: the cursor skips them, and the state
// warpgroup, which walks items rather than steps, visits them for their end state alone.
// Only launches without the sequence split walk: the split's passes give each CTA one item (its
// first, decoded by recurrence_item), so every later item is WorkItem(a, n, hv, vb)'s.
#pragma once
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_split.cuh"

namespace attnkit::cuda::gdn {

// From one of the CTA's items to its next (gridDim.x further) by carries on (n, hv, vb), with the
// stride decomposed once: an item's decode is three divisions and a 64-bit one for its q / k head,
// and inlined at every place that moves on they doubled the kernels' code.
struct ItemStride {
  int n, hv, vb;  // gridDim.x as (sequence, value head, value block)
  int group;      // value heads a q / k head
  template <class Args>
  CUTE_DEVICE explicit ItemStride(const Args& a) {
    const int G = static_cast<int>(gridDim.x);
    vb = G % a.v_blocks;
    hv = (G / a.v_blocks) % a.HV;
    n = G / a.v_blocks / a.HV;
    group = a.HV / a.H;
  }
  // The item after `it` (the caller checks that it is below the launch's items).
  template <class Args>
  CUTE_DEVICE WorkItem after(const Args& a, const WorkItem& it) const {
    int v = it.vb + vb, h = it.hv + hv, s = it.n + n;
    if (v >= a.v_blocks) v -= a.v_blocks, ++h;
    if (h >= a.HV) h -= a.HV, ++s;
    return WorkItem(a, s, h, v, h / group);
  }
};

// The steps of a CTA's items in order; kReverse: each item's chunks from its last (bwd_dhu).
// Construct one per warpgroup and copy it for the others a warpgroup needs (one decode).
template <class Args, bool kReverse>
struct StepCursor {
  const Args& a;
  ItemStride stride;
  int items;    // the launch's items (grid.x <= items)
  int m;        // this step's item; `items` once past the CTA's last step
  WorkItem it;  // item m
  int i = 0;    // step of item m
  int g = 0;    // step of the CTA

  CUTE_DEVICE StepCursor(const Args& a_, int items_)
      : a(a_), stride(a_), items(items_), m(static_cast<int>(blockIdx.x)), it(recurrence_item<kReverse>(a_, static_cast<int>(blockIdx.x))) {
    if (it.nchunks == 0) advance_item();
  }
  CUTE_DEVICE bool live() const { return m < items; }
  // The sequence's chunk this step works on.
  CUTE_DEVICE int chunk() const { return kReverse ? it.nchunks - 1 - i : i; }
  CUTE_DEVICE int valid_rows() const { return it.valid_rows(chunk()); }
  CUTE_DEVICE void next() {
    ++g;
    if (++i < it.nchunks) return;
    i = 0;
    advance_item();
  }

 private:
  // On to the CTA's next item with chunks.
  CUTE_DEVICE void advance_item() {
    while (m + int64_t(gridDim.x) < items) {
      m += static_cast<int>(gridDim.x);
      it = stride.after(a, it);
      if (it.nchunks > 0) return;
    }
    m = items;
  }
};

// Whether an item of this CTA after item `it` (index m) has chunks (bwd_dhu's state warpgroup:
// at an item's last step it must know whether the loader goes on).
template <class Args>
CUTE_DEVICE bool steps_after(const Args& a, const ItemStride& stride, int items, int m, WorkItem it) {
  for (int64_t next = m + int64_t(gridDim.x); next < items; next += gridDim.x) {
    it = stride.after(a, it);
    if (it.nchunks > 0) return true;
  }
  return false;
}

}  // namespace attnkit::cuda::gdn
