// src/cuda/gdn/chunk_bwd_launch.cuh — launching the chunked backward's own kernels for one
// (element type, K = V); the dispatch (chunk_bwd_dispatch.cu) runs them in order between the
// forward's kernels and bwd_dhu.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "src/cuda/gdn/chunk_bwd_finish.cuh"
#include "src/cuda/gdn/chunk_bwd_kernel.cuh"
#include "src/cuda/gdn/l2norm_rows.cuh"
#include "src/cuda/runtime.hpp"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda::gdn {

// The per-chunk kernels' parameters over `items` = slots * HV items and `ctas` CTAs: TMA where every
// row is 16-byte aligned and the state tensor's rows fit its 32-bit coordinates.
template <class E, int kD>
ChunkBwdParams<E, kD> chunk_bwd_params(const ChunkBwdArgs& a, int64_t slots, int64_t items, unsigned ctas) {
  ChunkBwdParams<E, kD> p;
  p.a = a;
  p.tma = a.vec16 && slots * a.HV * kD <= INT32_MAX && a.tokens <= INT32_MAX;
  p.fast_items = items + ctas <= INT32_MAX;  // every item index below 2^31, with a grid's step to spare
  p.by_heads = cutlass::FastDivmod(a.HV);
  p.by_seq_chunks = cutlass::FastDivmod(static_cast<int>(std::clamp<int64_t>((a.tokens + 63) / 64, 1, INT32_MAX)));
  if (p.tma) make_chunk_bwd_tmas(p, slots);
  return p;
}

// kernel: dv_local (step 1; persistent, two CTAs an SM, with TMA rows; else grid (chunk slots,
// value heads)) or the gradients (steps 3 and 4; persistent, one CTA per SM), over slots * HV items.
template <class E, int kD>
cudaError_t launch_gdn_chunk_bwd(const ChunkBwdArgs& a, int64_t slots, bool dv_local, cudaStream_t stream) {
  if (slots == 0 || a.HV == 0) return cudaSuccess;
  const int64_t items = slots * a.HV;
  if (dv_local) {
    const unsigned ctas = static_cast<unsigned>(std::min<int64_t>(items, 2 * current_device_sm_count()));
    const ChunkBwdParams<E, kD> p = chunk_bwd_params<E, kD>(a, slots, items, ctas);
    if (p.tma) {
      constexpr int kBytes = DvLocalLayout<kD>::kBytes;
      cudaError_t ok = ensure_dynamic_smem<gdn_chunk_dv_local_tma_kernel<E, kD>>(kBytes);
      if (ok != cudaSuccess) return ok;
      gdn_chunk_dv_local_tma_kernel<E, kD><<<ctas, kChunkBwdThreads, kBytes, stream>>>(p, items);
      return cudaGetLastError();
    }
    const dim3 grid(static_cast<unsigned>(slots), static_cast<unsigned>(a.HV));
    constexpr int kBytes = dv_local_smem_bytes<kD>();
    cudaError_t ok = ensure_dynamic_smem<gdn_chunk_dv_local_kernel<E, kD>>(kBytes);
    if (ok != cudaSuccess) return ok;
    gdn_chunk_dv_local_kernel<E, kD><<<grid, kChunkBwdThreads, kBytes, stream>>>(a);
  } else {
    const unsigned ctas = static_cast<unsigned>(std::min<int64_t>(items, current_device_sm_count()));
    constexpr int kBytes = chunk_bwd_smem_bytes<kD>();
    cudaError_t ok = ensure_dynamic_smem<gdn_chunk_bwd_kernel<E, kD>>(kBytes);
    if (ok != cudaSuccess) return ok;
    gdn_chunk_bwd_kernel<E, kD><<<ctas, kChunkBwdThreads, kBytes, stream>>>(chunk_bwd_params<E, kD>(a, slots, items, ctas), items);
  }
  return cudaGetLastError();
}

template <class E, int kD>
cudaError_t launch_gdn_bwd_finish(const BwdFinishArgs& a, cudaStream_t stream) {
  const int64_t rows = a.B * a.T;
  if (rows > 0 && a.dq.ptr) {  // GVA: dq, dk still per value head
    const int64_t qk_blocks = (rows * a.H * 32 + kFinishThreads - 1) / kFinishThreads;
    gdn_bwd_qk_finish_kernel<E, kD><<<static_cast<unsigned>(qk_blocks), kFinishThreads, 0, stream>>>(a);
  }
  const int64_t token_blocks = (rows * a.HV + kFinishThreads - 1) / kFinishThreads;
  if (rows > 0) gdn_bwd_token_finish_kernel<E><<<static_cast<unsigned>(token_blocks), kFinishThreads, 0, stream>>>(a);
  if (a.A_log && a.HV > 0)  // also without tokens: the sums are then 0
    gdn_bwd_gate_sums_kernel<E><<<static_cast<unsigned>(a.HV), kFinishThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda::gdn
