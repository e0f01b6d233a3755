// src/cuda/api.hpp — the CUDA backend's entry points (params already validated by src/api).
// Builds without CUDA link src/cuda/runtime_stub.cpp, whose versions say so.
#pragma once
#include "attnkit/attention.hpp"

namespace attnkit::cuda {

Status attention_forward(const AttentionFwdParams& p);
Status attention_backward(const AttentionBwdParams& p);
size_t attention_backward_workspace_size(const AttentionBwdParams& p);

}  // namespace attnkit::cuda
