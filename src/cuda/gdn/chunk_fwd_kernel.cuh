// src/cuda/gdn/chunk_fwd_kernel.cuh — gated delta rule chunked forward on Hopper: the two kernels
// and their launch for one (element type, key head dim).
//
// 1. WY kernel, grid (chunk slots, value heads), one warpgroup per CTA (chunk_fwd_wy.cuh): the
//    state-independent part of every chunk at once, into the workspace (w, u, gamma). Two
//    instantiations: K and V rows by TMA (16-byte aligned rows) or by cp.async, each path alone
//    in its kernel (at 128 registers a thread, both in one spill). The backward's rerun with the
//    forward's kept T (a.wy_from_t) runs gdn_chunk_wy_from_t_kernel instead: no inverse.
// 2. Recurrence kernel, one CTA per (sequence, value head, 64 value columns), in one of four
//    modes (Recurrence: output; output and the backward's start states and v_new; only those,
//    for the backward's rerun; only the end state, for the split below): the state's columns
//    evolve independently given w and K, so value blocks need no communication. Warpgroup 0 streams the chunks (chunk_fwd_load.cuh),
//    warpgroup 1 carries the state (chunk_fwd_state.cuh); they meet at the stages' "full" /
//    "empty" named barriers.
// Splitting them keeps the serial per-chunk path down to the state's own work: the WY part's
// latency (the 64 x 64 inverse above all) is paid by many CTAs side by side instead of once per
// chunk in sequence.
// With few chains (B = 1, few heads) the recurrence runs as the sequence split
// (chunk_fwd_split.cuh): segments side by side in two passes with a stitch between them, in
// inference, in a training forward and in the backward's rerun alike.
// Inference with many CTAs at DK = 128 (a.wu_in_recurrence, chosen by chunk_fwd_dispatch.cu): the
// WY kernel writes [Tu | Tw] rows instead of w and u, and gdn_chunk_fwd_wu_kernel forms w and u
// in shared memory with a third warpgroup (chunk_fwd_wu.cuh); w and u skip global memory. The
// backward's rerun with the forward's kept T, likewise (a.wy_from_t): no WY kernel; the third
// warpgroup forms the gates and [Tu | Tw] from T as well.
#pragma once
#include <cuda_runtime.h>
#include <cutlass/arch/reg_reconfig.h>

#include "src/cuda/gdn/chunk_fwd_load.cuh"
#include "src/cuda/gdn/chunk_fwd_split.cuh"
#include "src/cuda/gdn/chunk_fwd_state.cuh"
#include "src/cuda/gdn/chunk_fwd_wu.cuh"
#include "src/cuda/gdn/chunk_fwd_wy.cuh"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda::gdn {

// The WY CTA's ChunkSlot, by the whole CTA. Varlen with at most one sequence a thread: each thread
// tests one sequence's first slot (one load each, all in flight together) and the CTA counts them
// — first() increases with the sequence, so the count is n + 1 — where ChunkSlot's bisection, on
// every thread, waits on ~log2(N) dependent loads at the start of each of the varlen batch's ~9k
// short CTAs. The same slot either way.
template <int kThreads>
__device__ ChunkSlot wy_chunk_slot(const ChunkFwdArgs& a, int slot) {
  if (!a.cu_seqlens || a.num_seqs > kThreads) return ChunkSlot(a, int64_t(slot));
  const int m = static_cast<int>(threadIdx.x);
  const bool starts_by_slot = m < a.num_seqs && ChunkSlot::first(a, m) <= slot;
  return ChunkSlot::in_sequence(a, slot, max(__syncthreads_count(starts_by_slot) - 1, 0));
}

template <class T, bool kTma, bool kTPairs>
__global__ void __launch_bounds__(T::kWyThreads, kTPairs ? T::kWyTPairsCtasPerSm : T::kWyCtasPerSm) gdn_chunk_wy_kernel(CUTE_GRID_CONSTANT const WyParams<T> p) {
  const ChunkFwdArgs& a = p.a;
  const ChunkSlot slot = wy_chunk_slot<T::kWyThreads>(a, blockIdx.x);
  if (a.kept_slot_items && blockIdx.y == 0 && threadIdx.x == 0) {  // every slot's, live or not
    a.kept_slot_items[blockIdx.x] = slot_record(a, slot);
    if (slot.j == 0) a.kept_first[slot.n] = blockIdx.x;  // every sequence's first slot, empty ones too
  }
  if (!slot.live) return;
  const int hv = static_cast<int>(blockIdx.y);
  const WorkItem it(a, slot.n, hv, 0, qk_head_fast(a, hv));
  WyChunk<T, kTma, kTPairs>{p, a, it, slot.j, static_cast<int>(threadIdx.x)}.run();
}

// The backward's rerun from the forward's kept T (a.wy_from_t): w, u and gamma, no inverse.
template <class T, bool kTma>
__global__ void __launch_bounds__(T::kWyThreads, T::kWyCtasPerSm) gdn_chunk_wy_from_t_kernel(CUTE_GRID_CONSTANT const WyParams<T> p) {
  const ChunkFwdArgs& a = p.a;
  const ChunkSlot slot(a, blockIdx.x);
  if (!slot.live) return;
  const int hv = static_cast<int>(blockIdx.y);
  const WorkItem it(a, slot.n, hv, 0, qk_head_fast(a, hv));
  WyChunk<T, kTma>{p, a, it, slot.j, static_cast<int>(threadIdx.x)}.run_from_t();
}

template <class T, Recurrence kMode>
__global__ void __launch_bounds__(T::kThreads, 1) gdn_chunk_fwd_kernel(CUTE_GRID_CONSTANT const ChunkFwdParams<T> p) {
  const ChunkFwdArgs& a = p.a;
  const WorkItem it = recurrence_item(a, blockIdx.x, p.items);  // WorkItem(a, blockIdx.x) without the split
  if (threadIdx.x < 128) {
    if (it.nchunks > 0) LoadWarpgroup<T, kMode>{p, a, it, static_cast<int>(threadIdx.x)}.run();
  } else {
    StateWarpgroup<T, kMode>{a, it, static_cast<int>(threadIdx.x) - 128}.run();
  }
}

// The inference recurrence with w and u formed in the kernel (chunk_fwd_wu.cuh) by a third
// warpgroup, from the WY kernel's [Tu | Tw] rows and V: w and u skip global memory.
// kFromT: the backward's rerun from the forward's kept T (a.wy_from_t): no WY kernel runs; the w / u
// warpgroup forms the gates, [Tu | Tw] and then w and u from T, and the recurrence keeps the
// start states and v_new (kStates), w going out beside them.
template <class T, bool kFromT = false>
__global__ void __launch_bounds__(T::kThreadsWu, 1) gdn_chunk_fwd_wu_kernel(CUTE_GRID_CONSTANT const ChunkFwdParams<T> p) {
  constexpr Recurrence kMode = kFromT ? Recurrence::kStates : Recurrence::kOutput;
  const ChunkFwdArgs& a = p.a;
  const WorkItem it = p.items.item(a, blockIdx.x);
  const int wg = static_cast<int>(threadIdx.x) / 128, tid = static_cast<int>(threadIdx.x) % 128;
  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<T::kLoadRegsWu>();
    if (it.nchunks > 0) LoadWarpgroup<T, kMode, true, kFromT>{p, a, it, tid}.run();
  } else if (wg == 1) {
    cutlass::arch::warpgroup_reg_alloc<T::kStateRegsWu>();
    StateWarpgroup<T, kMode>{a, it, tid}.run();
  } else {
    cutlass::arch::warpgroup_reg_dealloc<T::kWuRegs>();
    WuWarpgroup<T, kFromT>{a, it, tid}.run();
  }
}

// The rows' TMA descriptors (row_tma.cuh); w and u are the workspace's, laid out like q and v.
// With a.wu_in_recurrence w's rows are [Tu | Tw], and u's descriptor reads V.
template <class T>
ChunkFwdParams<T> recurrence_params(const ChunkFwdArgs& a) {
  using Element = typename T::Element;
  ChunkFwdParams<T> p;
  p.a = a;
  p.items = ItemDivisors(a);
  if (!a.vec16) return p;
  const int batch = a.cu_seqlens ? 1 : a.num_seqs;
  p.shape_qk = rows_shape(a.tokens, T::kDK, a.H, batch);
  p.shape_w = rows_shape(a.tokens, T::kDK, a.HV, batch);
  p.shape_u = rows_shape(a.tokens, a.v_blocks * T::kBV, a.HV, batch);
  if (a.o.ptr) p.tma_q = make_rows_tma<Element, typename T::LayoutRowsDK>(a.q, p.shape_qk);
  p.tma_k = make_rows_tma<Element, typename T::LayoutRowsDK>(a.k, p.shape_qk);
  p.tma_w = make_rows_tma<Element, typename T::LayoutRowsDK>(a.w, p.shape_w);
  p.tma_u = make_rows_tma<Element, typename T::LayoutRowsBV>(a.wu_in_recurrence ? a.v : a.u, p.shape_u);
  if (a.o.ptr && a.o_vec16) p.tma_o = make_rows_tma_store<Element, typename T::LayoutRowsBV>(a.o, p.shape_u);
  if (a.wu_in_recurrence && a.wy_from_t) {
    p.shape_t = rows_shape(a.tokens, T::kC, a.HV, batch);
    p.tma_t = make_rows_tma<Element, typename T::LayoutCC>(a.tmat, p.shape_t);
    p.tma_w_out = make_rows_tma_store<Element, typename T::LayoutRowsDK>(a.w, p.shape_w);
  }
  if (!a.o.ptr && a.states && a.vnew.ptr) {  // kStates: the kept tiles by TMA stores
    const int64_t V = int64_t(a.v_blocks) * T::kBV;
    p.tma_vnew = make_rows_tma_store<Element, typename T::LayoutRowsBV>(a.vnew, p.shape_u);
    p.shape_states = rows_shape(T::kDK, static_cast<int>(V), a.HV, static_cast<int>(a.wy_slots));
    const RowTensor states{a.states, a.HV * T::kDK * V, V, T::kDK * V};  // (slot, k, hv) strides
    p.tma_states = make_rows_tma_store<Element, typename T::LayoutH>(states, p.shape_states);
  }
  return p;
}

// The WY kernel's TMA descriptors: K and V rows in (when a.vec16), w and u rows out (V = DK).
template <class T>
WyParams<T> wy_params(const ChunkFwdArgs& a) {
  using Element = typename T::Element;
  using Layout = typename T::LayoutRowsDK;
  WyParams<T> p;
  p.a = a;
  const int batch = a.cu_seqlens ? 1 : a.num_seqs;
  p.shape_k = rows_shape(a.tokens, T::kDK, a.H, batch);
  p.shape_v = p.shape_w = p.shape_u = rows_shape(a.tokens, T::kDK, a.HV, batch);
  if (a.vec16) {
    p.tma_k = make_rows_tma<Element, Layout>(a.k, p.shape_k);
    p.tma_v = make_rows_tma<Element, Layout>(a.v, p.shape_v);
  }
  p.tma_w = make_rows_tma_store<Element, Layout>(a.w, p.shape_w);
  if (a.u.ptr) p.tma_u = make_rows_tma_store<Element, Layout>(a.u, p.shape_u);  // absent with a.wu_in_recurrence
  return p;
}

template <auto kKernel, class T, int kSmem = T::kWySmemBytes>
cudaError_t launch_wy_kernel(const ChunkFwdArgs& a, cudaStream_t stream) {
  const cudaError_t ok = ensure_dynamic_smem<kKernel>(kSmem);
  if (ok != cudaSuccess) return ok;
  const dim3 grid(static_cast<unsigned>(a.wy_slots), static_cast<unsigned>(a.HV));
  kKernel<<<grid, T::kWyThreads, kSmem, stream>>>(wy_params<T>(a));
  return cudaGetLastError();
}
// The WY kernel that writes w, u and gamma (u absent: not written), by TMA or cp.async rows: from
// the forward's kept T where a.wy_from_t, else inverting.
template <class T>
cudaError_t launch_wy(const ChunkFwdArgs& a, cudaStream_t stream) {
  if (a.wy_from_t)
    return a.vec16 ? launch_wy_kernel<gdn_chunk_wy_from_t_kernel<T, true>, T>(a, stream)
                   : launch_wy_kernel<gdn_chunk_wy_from_t_kernel<T, false>, T>(a, stream);
  return a.vec16 ? launch_wy_kernel<gdn_chunk_wy_kernel<T, true, false>, T>(a, stream)
                 : launch_wy_kernel<gdn_chunk_wy_kernel<T, false, false>, T>(a, stream);
}

// One recurrence kernel (gdn_chunk_fwd_kernel<T, mode> with T::kThreads, or gdn_chunk_fwd_wu_kernel<T>
// with T::kThreadsWu), a CTA per item.
template <auto kKernel, class T>
cudaError_t launch_recurrence(int threads, const ChunkFwdArgs& a, int64_t items, cudaStream_t stream) {
  const cudaError_t ok = ensure_dynamic_smem<kKernel>(T::kSmemBytes);
  if (ok != cudaSuccess) return ok;
  kKernel<<<static_cast<unsigned>(items), threads, T::kSmemBytes, stream>>>(recurrence_params<T>(a));
  return cudaGetLastError();
}
template <class T, Recurrence kMode>
cudaError_t launch_recurrence(const ChunkFwdArgs& a, int64_t items, cudaStream_t stream) {
  return launch_recurrence<gdn_chunk_fwd_kernel<T, kMode>, T>(T::kThreads, a, items, stream);
}

// The sequence split's three launches after the WY kernel (SegmentSplit, chunk_fwd_split.cuh).
template <class T>
cudaError_t launch_split_recurrence(const ChunkFwdArgs& a, cudaStream_t stream) {
  if (a.wu_in_recurrence || a.cu_seqlens || a.split.count < 2 || !a.split.starts || !a.split.prods) return cudaErrorInvalidValue;
  const int64_t heads = int64_t(a.num_seqs) * a.HV;
  ChunkFwdArgs ends = a;
  ends.split.pass = SegmentSplit::kEnds;
  ends.split.extra_blocks = T::kDK / T::kBV;
  const int64_t end_items = segments_of_pass(ends.split) * heads * blocks_of_pass(ends);
  if (end_items > INT32_MAX) return cudaErrorInvalidValue;
  cudaError_t ok = launch_recurrence<T, Recurrence::kEnd>(ends, end_items, stream);
  if (ok != cudaSuccess) return ok;
  ok = launch_segment_stitch<T::kDK>(a.split, heads, a.HV, a.v_blocks * T::kBV, stream);
  if (ok != cudaSuccess) return ok;
  ChunkFwdArgs outputs = a;
  outputs.split.pass = SegmentSplit::kOutputs;
  const int64_t out_items = segments_of_pass(outputs.split) * heads * blocks_of_pass(outputs);
  if (out_items > INT32_MAX) return cudaErrorInvalidValue;
  // The second pass in the unsplit launch's mode: with the backward's start states and v_new
  // (a training forward, or the backward's rerun) each segment keeps its own chunks'.
  if (!a.o.ptr) return launch_recurrence<T, Recurrence::kStates>(outputs, out_items, stream);
  if (a.states) return launch_recurrence<T, Recurrence::kOutputAndStates>(outputs, out_items, stream);
  return launch_recurrence<T, Recurrence::kOutput>(outputs, out_items, stream);
}

template <class Element, int kDK>
cudaError_t launch_gdn_chunk_fwd(const ChunkFwdArgs& a, cudaStream_t stream) {
  using T = ChunkFwdTraits<Element, kDK>;
  const int64_t items = int64_t(a.num_seqs) * a.HV * a.v_blocks;
  if (items == 0) return cudaSuccess;
  if (items > INT32_MAX || a.wy_slots > INT32_MAX || a.HV > 65535) return cudaErrorInvalidValue;
  if (a.split.count > 1) {
    if (a.wu_in_recurrence) return cudaErrorInvalidValue;
    if (a.wy_slots > 0) {
      const cudaError_t ok = launch_wy<T>(a, stream);
      if (ok != cudaSuccess) return ok;
    }
    return launch_split_recurrence<T>(a, stream);
  }
  if constexpr (2 * T::kC == kDK) {  // w and u formed in the recurrence kernel (inference, TMA rows)
    if (a.wu_in_recurrence && a.wy_from_t) {  // the backward's rerun from the forward's kept T: no WY kernel
      if (!a.vec16 || a.o.ptr || !a.states) return cudaErrorInvalidValue;
      return launch_recurrence<gdn_chunk_fwd_wu_kernel<T, true>, T>(T::kThreadsWu, a, items, stream);
    }
    if (a.wu_in_recurrence) {
      if (!a.vec16 || !a.o.ptr || a.states || a.wy_from_t) return cudaErrorInvalidValue;
      if (a.wy_slots > 0) {
        const cudaError_t ok = launch_wy_kernel<gdn_chunk_wy_kernel<T, true, true>, T, T::kWyTPairsSmemBytes>(a, stream);
        if (ok != cudaSuccess) return ok;
      }
      return launch_recurrence<gdn_chunk_fwd_wu_kernel<T, false>, T>(T::kThreadsWu, a, items, stream);
    }
  }
  if (a.wu_in_recurrence) return cudaErrorInvalidValue;
  if (a.wy_slots > 0) {
    const cudaError_t ok = launch_wy<T>(a, stream);
    if (ok != cudaSuccess) return ok;
  }
  if (!a.o.ptr) return launch_recurrence<T, Recurrence::kStates>(a, items, stream);
  if (a.states) return launch_recurrence<T, Recurrence::kOutputAndStates>(a, items, stream);
  return launch_recurrence<T, Recurrence::kOutput>(a, items, stream);
}

}  // namespace attnkit::cuda::gdn
