// src/cuda/flex/bwd_lists.cuh — the kernels that build the backward's query tile lists
// (block_lists.hpp says what they compute): one thread per query block row, then one per key
// block column.
#pragma once
#include <cuda_runtime.h>

#include "src/cuda/flex/block_lists.hpp"

namespace attnkit::cuda::flex {

// (Templates on the block size: a kernel defined in a header included by several translation units.)
template <int kThreads>
__global__ void __launch_bounds__(kThreads) flex_bwd_mark_kernel(const ListBuildArgs x) {
  const int64_t t = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  if (t < int64_t(x.out.bm) * x.out.hm * x.nq) mark_query_block_row(x, t);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) flex_bwd_gather_kernel(const ListBuildArgs x) {
  const int64_t t = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  if (t < int64_t(x.out.bm) * x.out.hm * x.out.nk) gather_key_block_column(x, t);
}

inline cudaError_t build_query_tile_lists(const ListBuildArgs& x, cudaStream_t stream) {
  const int64_t rows = int64_t(x.out.bm) * x.out.hm * x.nq, cols = int64_t(x.out.bm) * x.out.hm * x.out.nk;
  if (rows == 0 || cols == 0) return cudaSuccess;
  constexpr int kThreads = 128;
  flex_bwd_mark_kernel<kThreads><<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0, stream>>>(x);
  flex_bwd_gather_kernel<kThreads><<<static_cast<unsigned>((cols + kThreads - 1) / kThreads), kThreads, 0, stream>>>(x);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda::flex
