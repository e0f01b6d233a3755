// src/cuda/flex/split_combine.cuh — the combine step of the flex forward's split-KV path
// (split_plan.hpp): per output row (b, h, q), merges the parts' normalised fp32 outputs by their
// LSEs and writes out (element type) and lse. One warp per row; lanes own columns d = lane + 32 j,
// so every read and write of a part's row is coalesced.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace attnkit::cuda::flex {

struct SplitCombineArgs {
  const float* partial_out = nullptr;  // [splits, rows, D]
  const float* partial_lse = nullptr;  // [splits, rows]
  void* out = nullptr;                 // [B, Hq, Sq, D] with strides
  float* lse = nullptr;                // [B, Hq, Sq] with strides, or null
  int64_t out_stride[3] = {};          // (batch, head, seq); d is unit
  int64_t lse_stride[3] = {};
  int64_t rows = 0;  // B * Hq * Sq
  int heads = 0, seqlen_q = 0, head_dim = 0, splits = 0;
};

template <class Element>
__global__ void __launch_bounds__(256) split_combine_kernel(const SplitCombineArgs c) {
  constexpr int kMaxCols = 8;  // D <= 256 = 8 columns per lane
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= c.rows) return;
  const int lane = threadIdx.x % 32;
  float m = -INFINITY;  // the largest part LSE (-inf: the row sees no key in any part)
  for (int s = lane; s < c.splits; s += 32) m = fmaxf(m, c.partial_lse[s * c.rows + row]);
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
  float sum = 0.f;
  for (int s = lane; s < c.splits; s += 32) {
    const float l = c.partial_lse[s * c.rows + row];
    sum += l == -INFINITY ? 0.f : expf(l - m);
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffff, sum, o);
  const float lse = m == -INFINITY ? -INFINITY : m + logf(sum);

  float acc[kMaxCols] = {};
  for (int s = 0; s < c.splits; ++s) {
    const float l = c.partial_lse[s * c.rows + row];
    if (l == -INFINITY) continue;  // an empty part wrote zeros
    const float w = expf(l - lse);
    const float* part = c.partial_out + (s * c.rows + row) * c.head_dim;
#pragma unroll
    for (int j = 0; j < kMaxCols; ++j)
      if (lane + 32 * j < c.head_dim) acc[j] += w * part[lane + 32 * j];
  }
  const int q = static_cast<int>(row % c.seqlen_q);
  const int h = static_cast<int>(row / c.seqlen_q % c.heads);
  const int64_t b = row / c.seqlen_q / c.heads;
  Element* out = static_cast<Element*>(c.out) + b * c.out_stride[0] + h * c.out_stride[1] + q * c.out_stride[2];
#pragma unroll
  for (int j = 0; j < kMaxCols; ++j)
    if (lane + 32 * j < c.head_dim) out[lane + 32 * j] = static_cast<Element>(acc[j]);
  if (c.lse && lane == 0) c.lse[b * c.lse_stride[0] + h * c.lse_stride[1] + q * c.lse_stride[2]] = lse;
}

template <class Element>
cudaError_t launch_split_combine(const SplitCombineArgs& c, cudaStream_t stream) {
  constexpr int kRowsPerBlock = 8;  // 256 threads
  const int64_t blocks = (c.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks == 0) return cudaSuccess;
  split_combine_kernel<Element><<<static_cast<unsigned>(blocks), 32 * kRowsPerBlock, 0, stream>>>(c);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda::flex
