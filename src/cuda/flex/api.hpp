// src/cuda/flex/api.hpp — the CUDA backend's flex attention entry points (params already
// validated by src/api). Builds without CUDA link src/cuda/runtime_stub.cpp's versions.
#pragma once
#include "attnkit/flex.hpp"

namespace attnkit::cuda {

Status flex_forward(const FlexFwdParams& p);
Status flex_backward(const FlexBwdParams& p);
size_t flex_backward_workspace_size(const FlexBwdParams& p);

}  // namespace attnkit::cuda
