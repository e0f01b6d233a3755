// src/cuda/gdn/chunk_host.hpp — host-side pieces of the chunked kernels' dispatch shared between
// the forward, bwd_dhu and the chunked backward (which reruns the forward's kernels and bwd_dhu).
#pragma once
#include <cuda_runtime.h>

#include "attnkit/gdn.hpp"
#include "src/cuda/gdn/bwd_dhu_args.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_plan.hpp"

namespace attnkit::cuda::gdn {

// The fewest (sequence, value head, 64-column value block) chains at which the recurrence kernel
// forms w and u itself at K = 128 (the inference forward, chunk_fwd_dispatch.cu, and the backward's
// rerun from a kept T, chunk_bwd_dispatch.cu): it adds ~0.15 us to each chunk of every chain, repaid
// only with many chains (docs/perf/gdn_chunk_fwd.md, v8). python/attnkit/gdn.py's "auto" keep
// restates it.
constexpr int64_t kWuInRecurrenceChains = 96;

// What the CUDA chunked forward (and so the backward) does not take among the inputs.
Status check_chunked_supported(const GdnInputs& in);
// The sequence split's plan (chunk_fwd_plan.hpp) for `in` on this device: dense batches only;
// requested as GdnFwdParams::num_segments. The training forward and the backward's rerun of it
// take the same plan from the same inputs, so kept and recomputed intermediates agree bit for bit.
SplitPlan plan_split_for(const GdnInputs& in, int requested);
// The forward kernels' arguments for `in`, with no outputs and no workspace set.
Status chunk_forward_args(const GdnInputs& in, ChunkFwdArgs& a);
// The WY and recurrence kernels for (dtype, K).
Status launch_chunk_forward(const ChunkFwdArgs& a, DType dtype, int64_t K, cudaStream_t stream);
// bwd_dhu's plan (chunk_fwd_plan.hpp) on this device: its value block, and the split of its reverse
// chain (dense batches only: `dense`; requested as GdnBwdDhuParams::num_segments).
DhuPlan plan_bwd_dhu_for(int64_t nchunks, int64_t pairs, int64_t K, int64_t V, bool dense, int requested);
// The op's l2norm as a pass of its own (l2norm_rows.cuh): `in`'s q and k normalised into qn, kn,
// their inverse norms into rstd_q, rstd_k.
Status launch_l2norm_rows(const GdnInputs& in, const RowTensor& qn, const RowTensor& kn, const RowTensor& rstd_q,
                          const RowTensor& rstd_k, cudaStream_t stream);
// bwd_dhu with every argument but the value block and the split's shape set (a.split.starts /
// prods set where plan splits): runs the plan (split only with TMA rows) and launches.
Status launch_bwd_dhu(BwdDhuArgs a, DType dtype, int64_t K, int64_t V, const DhuPlan& plan, cudaStream_t stream);

// Buffers one after the other from offset `total` on, each 256-byte aligned.
struct BufferLayout {
  size_t total = 0;
  size_t take(int64_t bytes) {
    const size_t at = total;
    total += (static_cast<size_t>(bytes) + 255) / 256 * 256;
    return at;
  }
};

// What the backward needs of the forward's kernels, at byte offsets in one buffer (the forward's
// GdnFwdParams::intermediates, or the backward's own workspace when it reruns them): w [rows, HV,
// K], T [rows, HV, 64], v_new [rows, HV, V] (16-bit), gamma [B, HV, T] (fp32), and each chunk's start
// state [slots, HV, K, V] (16-bit; ChunkSlot numbers the chunks). rows = B * T (varlen: B = 1).
// Which of them a buffer holds: T (with_t) and the rest (with_rest) — GdnKeep::kAll both, kT T
// alone, and the backward's workspace beside a kT buffer the rest alone. The forward's kT buffer
// (kt_extras) also holds, for a varlen batch of tokens (fewer than 2^31 rows), the backward's slot
// tables (ChunkFwdArgs::kept_first, kept_slot_items), and with the in-op l2norm the inverse norms
// of q's and k's rows (fp32, head-major [B, H, T]: a chunk's 64 rows of one head are 256 contiguous
// bytes, one warp's loads of them 4 sectors where [rows, H] took up to 32) — last, so the others'
// offsets do not move.
struct Intermediates {
  static constexpr size_t kAbsent = ~size_t(0);
  int64_t T = 0, H = 0, HV = 0, K = 0, V = 0;
  size_t w = kAbsent, tmat = kAbsent, vnew = kAbsent, gamma = kAbsent, states = kAbsent;
  size_t first = kAbsent, slot_items = kAbsent, rstd_q = kAbsent, rstd_k = kAbsent;
  Intermediates(const GdnInputs& in, BufferLayout& at, bool with_t = true, bool with_rest = true, bool kt_extras = false) {
    const bool varlen = in.cu_seqlens.defined();
    T = in.q.size(1);
    H = in.q.size(2);
    HV = in.v.size(2);
    K = in.q.size(3);
    V = in.v.size(3);
    const int64_t rows = in.q.size(0) * T, e = dtype_size(in.q.dtype);
    const int64_t slots = wy_slot_count(T, varlen ? in.cu_seqlens.size(0) - 1 : in.q.size(0), varlen);
    if (with_rest) w = at.take(rows * HV * K * e);
    if (with_t) tmat = at.take(rows * HV * 64 * e);
    if (with_rest) {
      vnew = at.take(rows * HV * V * e);
      gamma = at.take(rows * HV * 4);
      states = at.take(slots * HV * K * V * e);
    }
    if (kt_extras && varlen && rows > 0 && rows < INT32_MAX) {  // the slot tables (int64 [N], int4 [slots])
      first = at.take((in.cu_seqlens.size(0) - 1) * 8);
      slot_items = at.take(slots * 16);
    }
    if (kt_extras && in.use_qk_l2norm) {
      rstd_q = at.take(rows * H * 4);
      rstd_k = at.take(rows * H * 4);
    }
  }
  bool has_norms() const { return rstd_q != kAbsent; }
  // Points the forward kernels' w, gamma (the WY kernel's), T, v_new and states at `base`: those
  // this buffer holds.
  void point(ChunkFwdArgs& f, char* base) const {
    if (w != kAbsent) f.w = {base + w, T * HV * K, HV * K, K};
    if (tmat != kAbsent) f.tmat = {base + tmat, T * HV * 64, HV * 64, 64};
    if (vnew != kAbsent) f.vnew = {base + vnew, T * HV * V, HV * V, V};
    if (gamma != kAbsent) f.gamma = {base + gamma, T * HV, 1, T};  // [B, HV, T], as the norms
    if (states != kAbsent) f.states = base + states;
    if (slot_items != kAbsent) {
      f.kept_first = reinterpret_cast<int64_t*>(base + first);
      f.kept_slot_items = reinterpret_cast<int4*>(base + slot_items);
    }
    if (has_norms()) {
      f.rstd_q = {base + rstd_q, T * H, 1, T};  // [B, H, T]
      f.rstd_k = {base + rstd_k, T * H, 1, T};
    }
  }
};

}  // namespace attnkit::cuda::gdn
