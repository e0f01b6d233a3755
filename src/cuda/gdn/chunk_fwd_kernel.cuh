// src/cuda/gdn/chunk_fwd_kernel.cuh — gated delta rule chunked forward on Hopper: the kernel and
// its launch for one (element type, key head dim).
//
// CTA = (sequence, value head, 64 value columns); the state's columns evolve independently given
// the chunk's w and K, so the value blocks of one head need no communication (each recomputes the
// chunk's WY part, which the WY warpgroup overlaps with the state warpgroup's recurrence).
// Warpgroup 0: chunk_fwd_wy.cuh; warpgroup 1: chunk_fwd_state.cuh; they meet at the stages'
// "full" / "empty" named barriers.
#pragma once
#include <cuda_runtime.h>

#include "src/cuda/gdn/chunk_fwd_state.cuh"
#include "src/cuda/gdn/chunk_fwd_wy.cuh"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda::gdn {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) gdn_chunk_fwd_kernel(CUTE_GRID_CONSTANT const ChunkFwdArgs a) {
  const WorkItem it(a, blockIdx.x);
  if (threadIdx.x < 128) {
    if (it.nchunks > 0) WyWarpgroup<T>{a, it, static_cast<int>(threadIdx.x)}.run();
  } else {
    StateWarpgroup<T>{a, it, static_cast<int>(threadIdx.x) - 128}.run();
  }
}

template <class Element, int kDK>
cudaError_t launch_gdn_chunk_fwd(const ChunkFwdArgs& a, cudaStream_t stream) {
  using T = ChunkFwdTraits<Element, kDK>;
  const int64_t items = int64_t(a.num_seqs) * a.HV * a.v_blocks;
  if (items == 0) return cudaSuccess;
  if (items > INT32_MAX) return cudaErrorInvalidValue;
  const cudaError_t ok = ensure_dynamic_smem<gdn_chunk_fwd_kernel<T>>(T::kSmemBytes);
  if (ok != cudaSuccess) return ok;
  gdn_chunk_fwd_kernel<T><<<static_cast<unsigned>(items), T::kThreads, T::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda::gdn
