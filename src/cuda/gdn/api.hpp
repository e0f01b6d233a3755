// src/cuda/gdn/api.hpp — the CUDA backend's gated delta rule entry points (params validated).
#pragma once
#include "attnkit/gdn.hpp"

namespace attnkit::cuda {

Status gdn_forward(const GdnFwdParams& p);  // chunked, scalar gate, K = V in {64, 128}
size_t gdn_forward_workspace_size(const GdnFwdParams& p);  // 0 where gdn_forward refuses the inputs
size_t gdn_intermediates_size(const GdnInputs& in, GdnKeep keep);  // 0 where gdn_forward refuses the inputs
Status gdn_backward(const GdnBwdParams& p);  // chunked, as gdn_forward
size_t gdn_backward_workspace_size(const GdnBwdParams& p);  // 0 where gdn_backward refuses the inputs
Status gdn_decode(const GdnDecodeParams& p);
Status gdn_bwd_dhu(const GdnBwdDhuParams& p);  // 16-bit rows, K in {64, 128}, V a multiple of 64
size_t gdn_bwd_dhu_workspace_size(const GdnBwdDhuParams& p);  // varlen: chunk offsets; else 0

}  // namespace attnkit::cuda
