// src/cuda/attention/fwd_dispatch.cu — AttentionFwdParams -> the forward instantiation for its
// (dtype, head dim), after the checks only the GPU path has (TMA alignment, supported shapes).
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include <cmath>
#include <string>

#include "src/cuda/api.hpp"
#include "src/cuda/attention/fwd_args.hpp"
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

Status attention_forward(const AttentionFwdParams& p) {
  if (p.q.dtype != DType::kBFloat16 && p.q.dtype != DType::kFloat16)
    return Unsupported(std::string("q: the CUDA kernels take bfloat16 or float16, got ") + dtype_name(p.q.dtype));
  const int64_t D = p.q.size(-1);
  if ((D != 64 && D != 128 && D != 256) || p.v.size(-1) != D)
    return Unsupported("q: the CUDA kernels need head dims D = Dv in {64, 128, 256}, got D = " + std::to_string(D) +
                       ", Dv = " + std::to_string(p.v.size(-1)));
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"}})
    ATTNKIT_RETURN_IF_ERROR(check_tma_operand(*t, name));
  const bool varlen = p.cu_seqlens_q.defined();
  AttnFwdArgs a;
  a.q = p.q.data;
  a.k = p.k.data;
  a.v = p.v.data;
  a.out = p.out.data;
  a.lse = p.lse.defined() ? static_cast<float*>(p.lse.data) : nullptr;
  const int o = varlen ? 0 : 1;
  auto strides = [&](const TensorView& t, int64_t (&s)[3]) {
    s[0] = varlen ? 0 : t.strides[0];
    s[1] = t.strides[o];
    s[2] = t.strides[o + 1];
  };
  strides(p.q, a.q_stride);
  strides(p.k, a.k_stride);
  strides(p.v, a.v_stride);
  strides(p.out, a.o_stride);
  if (p.lse.defined()) {
    a.lse_stride[0] = varlen ? 0 : p.lse.strides[0];
    a.lse_stride[1] = p.lse.strides[varlen ? 0 : 1];
    a.lse_stride[2] = p.lse.strides[varlen ? 1 : 2];
  }
  a.heads_q = static_cast<int>(p.q.size(o + 1));
  a.heads_kv = static_cast<int>(p.k.size(o + 1));
  a.seqlen_q = static_cast<int>(p.q.size(o));
  a.seqlen_k = static_cast<int>(p.k.size(o));
  if (varlen) {
    a.batch = static_cast<int>(p.cu_seqlens_q.size(0) - 1);
    a.cu_seqlens_q = static_cast<const int32_t*>(p.cu_seqlens_q.data);
    a.cu_seqlens_k = static_cast<const int32_t*>(p.cu_seqlens_k.data);
    if (p.max_seqlen_q <= 0 && a.seqlen_q > 0)
      return InvalidArgument("max_seqlen_q: the CUDA kernels need the longest query length (> 0) for varlen input");
    a.max_seqlen_q = static_cast<int>(p.max_seqlen_q);
  } else {
    a.batch = static_cast<int>(p.q.size(0));
    a.max_seqlen_q = a.seqlen_q;
  }
  a.scale = static_cast<float>(p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(D)));
  a.softcap = static_cast<float>(p.softcap);
  a.mask = p.mask;
  a.stream = p.stream;
  a.tile_counter = static_cast<int*>(p.workspace.data);  // validated: >= 16 bytes
  if (reinterpret_cast<uintptr_t>(a.tile_counter) % alignof(int) != 0)
    return InvalidArgument("workspace: expected a 4-byte aligned device pointer");
  a.num_sms = current_device_sm_count();
  const cudaError_t err = p.q.dtype == DType::kBFloat16 ? launch_for_head_dim<cutlass::bfloat16_t>(static_cast<int>(D), a)
                                                        : launch_for_head_dim<cutlass::half_t>(static_cast<int>(D), a);
  if (err != cudaSuccess) return {StatusCode::kBackendError, std::string("attention_forward: ") + cudaGetErrorString(err)};
  return Status::Ok();
}

}  // namespace attnkit::cuda
