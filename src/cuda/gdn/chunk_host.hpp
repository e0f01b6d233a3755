// src/cuda/gdn/chunk_host.hpp — host-side pieces of the chunked kernels' dispatch shared between
// the forward, bwd_dhu and the chunked backward (which reruns the forward's kernels and bwd_dhu).
#pragma once
#include <cuda_runtime.h>

#include "attnkit/gdn.hpp"
#include "src/cuda/gdn/bwd_dhu_args.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"

namespace attnkit::cuda::gdn {

// What the CUDA chunked forward (and so the backward) does not take among the inputs.
Status check_chunked_supported(const GdnInputs& in);
// The forward kernels' arguments for `in`, with no outputs and no workspace set.
Status chunk_forward_args(const GdnInputs& in, ChunkFwdArgs& a);
// The WY and recurrence kernels for (dtype, K).
Status launch_chunk_forward(const ChunkFwdArgs& a, DType dtype, int64_t K, cudaStream_t stream);
// bwd_dhu with every argument but the value block set: picks it (a.v_blocks) and launches.
Status launch_bwd_dhu(BwdDhuArgs a, DType dtype, int64_t K, int64_t V, cudaStream_t stream);

}  // namespace attnkit::cuda::gdn
