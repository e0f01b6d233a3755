// src/cuda/runtime_stub.cpp — device_count() for builds without CUDA.
#include "src/cuda/runtime.hpp"

namespace attnkit::cuda {
int device_count() { return 0; }
int current_device_sm_count() { return 1; }
double current_device_dram_tbps() { return 0.0; }
}  // namespace attnkit::cuda

#include "src/cuda/api.hpp"
#include "src/cuda/flex/api.hpp"
#include "src/cuda/gdn/api.hpp"

namespace attnkit::cuda {
Status attention_forward(const AttentionFwdParams&) {
  return Unsupported("attention_forward: this build has no CUDA kernels (configured without nvcc)");
}
Status attention_backward(const AttentionBwdParams&) {
  return Unsupported("attention_backward: this build has no CUDA kernels (configured without nvcc)");
}
size_t attention_backward_workspace_size(const AttentionBwdParams&) { return 0; }
Status flex_forward(const FlexFwdParams&) {
  return Unsupported("flex_attention_forward: this build has no CUDA kernels (configured without nvcc)");
}
Status flex_backward(const FlexBwdParams&) {
  return Unsupported("flex_attention_backward: this build has no CUDA kernels (configured without nvcc)");
}
size_t flex_backward_workspace_size(const FlexBwdParams&) { return 0; }
}  // namespace attnkit::cuda

namespace attnkit::cuda {
Status gdn_forward(const GdnFwdParams&) {
  return Unsupported("gdn_forward: this build has no CUDA kernels (configured without nvcc)");
}
size_t gdn_forward_workspace_size(const GdnFwdParams&) { return 0; }
size_t gdn_intermediates_size(const GdnInputs&, GdnKeep) { return 0; }
Status gdn_backward(const GdnBwdParams&) {
  return Unsupported("gdn_backward: this build has no CUDA kernels (configured without nvcc)");
}
size_t gdn_backward_workspace_size(const GdnBwdParams&) { return 0; }
Status gdn_decode(const GdnDecodeParams&) {
  return Unsupported("gdn_decode: this build has no CUDA kernels (configured without nvcc)");
}
Status gdn_bwd_dhu(const GdnBwdDhuParams&) {
  return Unsupported("gdn_bwd_dhu: this build has no CUDA kernels (configured without nvcc)");
}
size_t gdn_bwd_dhu_workspace_size(const GdnBwdDhuParams&) { return 0; }
}  // namespace attnkit::cuda
