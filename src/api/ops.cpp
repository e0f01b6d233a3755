// src/api/ops.cpp — the public entry points: validate, then hand the op to the backend of the
// device its tensors live on.
#include "attnkit/attnkit.hpp"
#include "attnkit/validate.hpp"
#include "src/cpu/backend.hpp"
#include "src/cuda/api.hpp"
#include "src/cuda/flex/api.hpp"
#include "src/cuda/flex/split_plan.hpp"
#include "src/cuda/gdn/api.hpp"
#include "src/cuda/runtime.hpp"

namespace attnkit {
namespace {

Status no_cuda_kernel(const char* op) {
  return Unsupported(std::string(op) + ": this build has no CUDA kernel for it yet; pass CPU tensors to use the CPU backend");
}

template <class P, class CpuFn>
Status dispatch(const P& p, const TensorView& q, const char* op, CpuFn&& cpu_fn) {
  ATTNKIT_RETURN_IF_ERROR(validate(p));
  if (q.device.type == DeviceType::kCPU) return cpu_fn(p);
  return no_cuda_kernel(op);
}

template <class P, class CpuFn, class CudaFn>
Status dispatch(const P& p, const TensorView& q, CpuFn&& cpu_fn, CudaFn&& cuda_fn) {
  ATTNKIT_RETURN_IF_ERROR(validate(p));
  return q.device.type == DeviceType::kCPU ? cpu_fn(p) : cuda_fn(p);
}

}  // namespace

// The CPU backend allocates its scratch on the host itself. The CUDA attention and flex forward
// need one int (their tile scheduler's counter), padded to 16 bytes.
size_t attention_forward_workspace_size(const AttentionFwdParams& p) {
  return p.q.device.type == DeviceType::kCUDA ? 16 : 0;
}
// The flex forward's short-query path adds its per-part outputs (src/cuda/flex/split_plan.hpp).
size_t flex_forward_workspace_size(const FlexFwdParams& p) {
  return p.q.device.type == DeviceType::kCUDA ? cuda::flex::plan_splits(p, cuda::current_device_sm_count()).workspace_bytes : 0;
}
// The CUDA backward keeps fp32 partials (dQ, GQA dK/dV) and per-row statistics in the workspace.
size_t attention_backward_workspace_size(const AttentionBwdParams& p) {
  return p.q.device.type == DeviceType::kCUDA ? cuda::attention_backward_workspace_size(p) : 0;
}
size_t flex_backward_workspace_size(const FlexBwdParams& p) {
  return p.q.device.type == DeviceType::kCUDA ? cuda::flex_backward_workspace_size(p) : 0;
}
// The CUDA chunked forward can keep its WY pieces, v_new and chunk start states (or T alone) for
// the backward.
size_t gdn_intermediates_size(const GdnInputs& in, GdnKeep keep) {
  return in.q.device.type == DeviceType::kCUDA ? cuda::gdn_intermediates_size(in, keep) : 0;
}
// The CUDA chunked forward keeps its WY kernel's w, u and gamma in the workspace.
size_t gdn_forward_workspace_size(const GdnFwdParams& p) {
  return p.in.q.device.type == DeviceType::kCUDA ? cuda::gdn_forward_workspace_size(p) : 0;
}
// The CUDA chunked backward keeps the forward's pieces (w, u, gamma, T, v_new, every chunk's start
// state; rerun unless the forward kept them as intermediates), bwd_dhu's dh and dv2, and
// per-value-head fp32 gradients.
size_t gdn_backward_workspace_size(const GdnBwdParams& p) {
  return p.in.q.device.type == DeviceType::kCUDA ? cuda::gdn_backward_workspace_size(p) : 0;
}
// The CUDA bwd_dhu of a varlen batch keeps each sequence's first chunk index in the workspace.
size_t gdn_bwd_dhu_workspace_size(const GdnBwdDhuParams& p) {
  return p.q.device.type == DeviceType::kCUDA ? cuda::gdn_bwd_dhu_workspace_size(p) : 0;
}

Status attention_forward(const AttentionFwdParams& p) {
  return dispatch(p, p.q, cpu::attention_forward, cuda::attention_forward);
}
Status attention_backward(const AttentionBwdParams& p) {
  return dispatch(p, p.q, cpu::attention_backward, cuda::attention_backward);
}
Status flex_attention_forward(const FlexFwdParams& p) {
  return dispatch(p, p.q, cpu::flex_forward, cuda::flex_forward);
}
Status flex_attention_backward(const FlexBwdParams& p) {
  return dispatch(p, p.q, cpu::flex_backward, cuda::flex_backward);
}
Status gdn_forward(const GdnFwdParams& p) { return dispatch(p, p.in.q, cpu::gdn_forward, cuda::gdn_forward); }
Status gdn_backward(const GdnBwdParams& p) { return dispatch(p, p.in.q, cpu::gdn_backward, cuda::gdn_backward); }
Status gdn_decode(const GdnDecodeParams& p) { return dispatch(p, p.q, cpu::gdn_decode, cuda::gdn_decode); }
Status gdn_bwd_dhu(const GdnBwdDhuParams& p) { return dispatch(p, p.q, cpu::gdn_bwd_dhu, cuda::gdn_bwd_dhu); }

bool cuda_available() { return cuda::device_count() > 0; }
const char* version() { return "0.1.0"; }

}  // namespace attnkit
