// src/cuda/attention/fwd_dispatch.cu — AttentionFwdParams -> the forward instantiation for its
// (dtype, head dim), after the checks only the GPU path has (TMA alignment, supported shapes).
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include <cmath>
#include <string>

#include "src/cuda/api.hpp"
#include "src/cuda/attention/dispatch_common.hpp"
#include "src/cuda/attention/fwd_args.hpp"
#include "src/cuda/cuda_status.hpp"
#include "src/cuda/attention/tma_checks.hpp"
#include "src/cuda/runtime.hpp"

namespace attnkit::cuda {
namespace attn {
template <class Element, int kHeadDim>
cudaError_t launch_attention_fwd(const AttnFwdArgs& a);
}  // namespace attn

namespace {

template <class Element>
cudaError_t launch_for_head_dim(int d, const AttnFwdArgs& a) {
  switch (d) {
    case 64: return attn::launch_attention_fwd<Element, 64>(a);
    case 128: return attn::launch_attention_fwd<Element, 128>(a);
    default: return attn::launch_attention_fwd<Element, 256>(a);
  }
}

}  // namespace

Status attention_forward(const AttentionFwdParams& caller) {
  AttentionFwdParams p = caller;
  normalize_unit_strides(p.q, p.k, p.v, p.out, p.lse);
  ATTNKIT_RETURN_IF_ERROR(check_dtype_and_head_dim(p.q, p.v, {64, 128, 256}, "the CUDA forward"));
  const int64_t D = p.q.size(-1);
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"}})
    ATTNKIT_RETURN_IF_ERROR(check_tma_operand(*t, name));
  const bool varlen = p.cu_seqlens_q.defined();
  AttnFwdArgs a;
  ATTNKIT_RETURN_IF_ERROR(fill_shared_args(p, a));
  fold_scale_sign_into_q(a);
  a.out = p.out.data;
  bsh_strides(p.out, varlen, a.o_stride);
  if (p.lse.defined()) {
    a.lse = static_cast<float*>(p.lse.data);
    lse_strides(p.lse, varlen, a.lse_stride);
  }
  a.tile_counter = static_cast<int*>(p.workspace.data);  // validated: >= 16 bytes
  if (reinterpret_cast<uintptr_t>(a.tile_counter) % alignof(int) != 0)
    return InvalidArgument("workspace: expected a 4-byte aligned device pointer");
  a.num_sms = current_device_sm_count();
  const cudaError_t err = p.q.dtype == DType::kBFloat16 ? launch_for_head_dim<cutlass::bfloat16_t>(static_cast<int>(D), a)
                                                        : launch_for_head_dim<cutlass::half_t>(static_cast<int>(D), a);
  return cuda_status(err, "attention_forward");
}

}  // namespace attnkit::cuda
