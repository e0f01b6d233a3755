// src/cuda/gdn/bwd_dhu_kernel.cuh — the reverse state-gradient kernel ("bwd_dhu") and its launch
// for one (element type, key head dim, value block).
//
// One CTA per (sequence, value head, BV value columns): the columns of dH evolve independently
// (every product contracts over keys or rows, never over values), so value blocks need no
// communication; with too few of them, each chain is also cut into segments (bwd_dhu_split.cuh).
// Warpgroup 0 streams the chunks from the last (bwd_dhu_load.cuh), warpgroup 1 carries dH
// (bwd_dhu_state.cuh); they meet at the stages' "full" / "empty" named barriers. With kLocal
// warpgroup 2 works out each chunk's dv from its rows (bwd_dhu_local.cuh).
#pragma once
#include <cuda_runtime.h>
#include <cutlass/arch/reg_reconfig.h>

#include "src/cuda/gdn/bwd_dhu_load.cuh"
#include "src/cuda/gdn/bwd_dhu_local.cuh"
#include "src/cuda/gdn/bwd_dhu_split.cuh"
#include "src/cuda/gdn/bwd_dhu_state.cuh"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda::gdn {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) gdn_bwd_dhu_kernel(CUTE_GRID_CONSTANT const BwdDhuParams<T> p) {
  const BwdDhuArgs& a = p.a;
  const WorkItem it = dhu_item(a, blockIdx.x, p.items);  // WorkItem(a, blockIdx.x) without the split
  if (threadIdx.x == 0) {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    CUTE_UNROLL
    for (int s = 0; s < T::kStages; ++s) sm.rows_landed[s].init(1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if constexpr (T::kLocal) {
    const int wg = static_cast<int>(threadIdx.x) / 128, tid = static_cast<int>(threadIdx.x) % 128;
    if (wg == 0) {
      cutlass::arch::warpgroup_reg_dealloc<T::kLoadRegs>();
      if (it.nchunks > 0) DhuLoadWarpgroup<T>{p, a, it, tid}.run();
    } else if (wg == 1) {
      cutlass::arch::warpgroup_reg_alloc<T::kStateRegs>();
      DhuStateWarpgroup<T>{a, it, tid}.run();
    } else {
      cutlass::arch::warpgroup_reg_dealloc<T::kLocalRegs>();
      if (it.nchunks > 0) DhuLocalWarpgroup<T>{a, it, tid}.run();
    }
  } else if (threadIdx.x < 128) {
    if (it.nchunks > 0) DhuLoadWarpgroup<T>{p, a, it, static_cast<int>(threadIdx.x)}.run();
  } else {
    DhuStateWarpgroup<T>{a, it, static_cast<int>(threadIdx.x) - 128}.run();
  }
}

// The rows' TMA descriptors (row_tma.cuh).
template <class T>
void make_row_tmas(BwdDhuParams<T>& p, const BwdDhuArgs& a, int batch) {
  using Element = typename T::Element;
  p.shape_qk = rows_shape(a.tokens, T::kDK, a.H, batch);
  p.shape_w = rows_shape(a.tokens, T::kDK, a.HV, batch);
  p.shape_v = rows_shape(a.tokens, a.v_blocks * T::kBV, a.HV, batch);
  p.tma_q = make_rows_tma<Element, typename T::LayoutRowsDK>(a.q, p.shape_qk);
  p.tma_k = make_rows_tma<Element, typename T::LayoutRowsDK>(a.k, p.shape_qk);
  p.tma_w = make_rows_tma<Element, typename T::LayoutRowsDK>(a.w, p.shape_w);
  p.tma_do = make_rows_tma<Element, typename T::LayoutRowsBV>(a.dout, p.shape_v);
  if constexpr (!T::kLocal) p.tma_dv = make_rows_tma<Element, typename T::LayoutRowsBV>(a.dv, p.shape_v);
}

// dh's TMA store (bwd_dhu_args.cuh's DhShape); a batch of one gets any valid stride.
template <class T>
void make_dh_tma(BwdDhuParams<T>& p, const BwdDhuArgs& a, int64_t K, int64_t V) {
  using Element = typename T::Element;
  p.shape_dh = make_shape(int32_t(K), int32_t(V), int32_t(a.dh_chunks), a.HV, int32_t(a.dh_batch));
  const int64_t sb = a.dh_batch == 1 ? a.dh_sc * a.dh_chunks : a.dh_sb;
  Tensor g = make_tensor(make_gmem_ptr(static_cast<Element*>(a.dh)), p.shape_dh, make_stride(a.dh_sk, _1{}, a.dh_sc, a.dh_sh, sb));
  p.tma_dh = make_tma_copy(SM90_TMA_STORE{}, g, typename T::LayoutDh{}, Shape<Int<T::kDK>, Int<T::kBV>>{}, _1{});
}

template <class T>
cudaError_t launch_pass(const BwdDhuParams<T>& p, int64_t items, cudaStream_t stream) {
  if (items > INT32_MAX) return cudaErrorInvalidValue;
  if (items == 0) return cudaSuccess;
  gdn_bwd_dhu_kernel<T><<<static_cast<unsigned>(items), T::kThreads, T::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

// The sequence split's three launches (bwd_dhu_split.cuh): ends and A, the stitch, the outputs.
template <class T>
cudaError_t launch_split(const BwdDhuParams<T>& p, cudaStream_t stream) {
  const BwdDhuArgs& a = p.a;
  if (a.cu_seqlens || !a.vec16 || !a.split.starts || !a.split.prods) return cudaErrorInvalidValue;
  const int64_t chains = int64_t(a.num_seqs) * a.HV;
  BwdDhuParams<T> ends = p;
  ends.a.split.pass = SegmentSplit::kEnds;
  ends.a.split.extra_blocks = T::kDK / T::kBV;
  cudaError_t ok = launch_pass(ends, segments_of_pass(ends.a.split) * chains * blocks_of_pass(ends.a), stream);
  if (ok != cudaSuccess) return ok;
  ok = launch_segment_stitch<T::kDK>(a.split, chains, a.HV, a.v_blocks * T::kBV, stream);
  if (ok != cudaSuccess) return ok;
  BwdDhuParams<T> outputs = p;
  outputs.a.split.pass = SegmentSplit::kOutputs;
  return launch_pass(outputs, segments_of_pass(outputs.a.split) * chains * blocks_of_pass(outputs.a), stream);
}

template <class T>
cudaError_t launch_with(const BwdDhuArgs& a, cudaStream_t stream) {
  const int64_t items = int64_t(a.num_seqs) * a.HV * a.v_blocks;
  if (items == 0) return cudaSuccess;
  if (items > INT32_MAX) return cudaErrorInvalidValue;
  BwdDhuParams<T> p;
  p.a = a;
  p.items = ItemDivisors(a);
  if (a.vec16) {
    make_row_tmas(p, a, a.cu_seqlens ? 1 : a.num_seqs);
  }
  if (a.dh_vec16 && a.dh_chunks > 0) make_dh_tma(p, a, T::kDK, int64_t(a.v_blocks) * T::kBV);
  const cudaError_t ok = ensure_dynamic_smem<gdn_bwd_dhu_kernel<T>>(T::kSmemBytes);
  if (ok != cudaSuccess) return ok;
  if (a.split.count > 1) return launch_split(p, stream);
  return launch_pass(p, items, stream);
}

// kLocal only where its warpgroup can work (bwd_dhu_args.cuh): the caller decides, this refuses.
template <class Element, int kDK, int kBV>
cudaError_t launch_gdn_bwd_dhu(const BwdDhuArgs& a, cudaStream_t stream) {
  if (!a.local) return launch_with<BwdDhuTraits<Element, kDK, kBV>>(a, stream);
  if constexpr (kBV == 64) {
    if (!a.vec16 || a.split.count > 1 || a.per_key_gate || a.dv.ptr) return cudaErrorInvalidValue;
    return launch_with<BwdDhuTraits<Element, kDK, kBV, true>>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace attnkit::cuda::gdn
