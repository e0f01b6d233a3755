// src/cuda/gdn/bwd_dhu_kernel.cuh — the reverse state-gradient kernel ("bwd_dhu") and its launch
// for one (element type, key head dim, value block).
//
// One CTA per (sequence, value head, BV value columns): the columns of dH evolve independently
// (every product contracts over keys or rows, never over values), so value blocks need no
// communication. Warpgroup 0 streams the chunks from the last (bwd_dhu_load.cuh), warpgroup 1
// carries dH (bwd_dhu_state.cuh); they meet at the stages' "full" / "empty" named barriers.
#pragma once
#include <cuda_runtime.h>

#include "src/cuda/gdn/bwd_dhu_load.cuh"
#include "src/cuda/gdn/bwd_dhu_state.cuh"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda::gdn {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) gdn_bwd_dhu_kernel(CUTE_GRID_CONSTANT const BwdDhuParams<T> p) {
  const BwdDhuArgs& a = p.a;
  const WorkItem it(a, blockIdx.x);
  if (threadIdx.x == 0) {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    CUTE_UNROLL
    for (int s = 0; s < T::kStages; ++s) sm.rows_landed[s].init(1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    if (it.nchunks > 0) DhuLoadWarpgroup<T>{p, a, it, static_cast<int>(threadIdx.x)}.run();
  } else {
    DhuStateWarpgroup<T>{a, it, static_cast<int>(threadIdx.x) - 128}.run();
  }
}

// The rows' TMA descriptors: [B, T, heads, D] as (t, d, head, batch); a packed (varlen) batch is
// one sequence of all tokens, each CTA offsetting to its own.
template <class T>
void make_row_tmas(BwdDhuParams<T>& p, const RowTensor& q, const RowTensor& k, const RowTensor& w, const RowTensor& dout,
                   const RowTensor& dv, int batch, int tokens, int H, int HV, int V) {
  using Element = typename T::Element;
  const int rows = tokens > 0 ? tokens : 1;  // an empty batch still needs valid descriptors (never used)
  auto gmem = [&](const RowTensor& x, auto shape) {  // a packed batch's (unused) batch stride: past its rows
    const int64_t sb = batch == 1 ? x.st * rows : x.sb;
    return make_tensor(make_gmem_ptr(static_cast<Element const*>(x.ptr)), shape, make_stride(x.st, _1{}, x.sh, sb));
  };
  p.shape_qk = make_shape(rows, T::kDK, H, batch);
  p.shape_w = make_shape(rows, T::kDK, HV, batch);
  p.shape_v = make_shape(rows, V, HV, batch);
  using RowsDK = Shape<Int<T::kC>, Int<T::kDK>>;
  using RowsBV = Shape<Int<T::kC>, Int<T::kBV>>;
  p.tma_q = make_tma_copy(SM90_TMA_LOAD{}, gmem(q, p.shape_qk), typename T::LayoutRowsDK{}, RowsDK{}, _1{});
  p.tma_k = make_tma_copy(SM90_TMA_LOAD{}, gmem(k, p.shape_qk), typename T::LayoutRowsDK{}, RowsDK{}, _1{});
  p.tma_w = make_tma_copy(SM90_TMA_LOAD{}, gmem(w, p.shape_w), typename T::LayoutRowsDK{}, RowsDK{}, _1{});
  p.tma_do = make_tma_copy(SM90_TMA_LOAD{}, gmem(dout, p.shape_v), typename T::LayoutRowsBV{}, RowsBV{}, _1{});
  p.tma_dv = make_tma_copy(SM90_TMA_LOAD{}, gmem(dv, p.shape_v), typename T::LayoutRowsBV{}, RowsBV{}, _1{});
}

template <class Element, int kDK, int kBV>
cudaError_t launch_gdn_bwd_dhu(const BwdDhuArgs& a, cudaStream_t stream) {
  using T = BwdDhuTraits<Element, kDK, kBV>;
  const int64_t items = int64_t(a.num_seqs) * a.HV * a.v_blocks;
  if (items == 0) return cudaSuccess;
  if (items > INT32_MAX) return cudaErrorInvalidValue;
  BwdDhuParams<T> p;
  p.a = a;
  if (a.vec16) {
    const int batch = a.cu_seqlens ? 1 : a.num_seqs;
    make_row_tmas(p, a.q, a.k, a.w, a.dout, a.dv, batch, static_cast<int>(a.tokens), a.H, a.HV, a.v_blocks * kBV);
  }
  const cudaError_t ok = ensure_dynamic_smem<gdn_bwd_dhu_kernel<T>>(T::kSmemBytes);
  if (ok != cudaSuccess) return ok;
  gdn_bwd_dhu_kernel<T><<<static_cast<unsigned>(items), T::kThreads, T::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda::gdn
