// src/cuda/attention/bwd_dispatch.cu — AttentionBwdParams -> the backward instantiation for its
// (dtype, head dim), after the checks only the GPU path has; and the workspace it needs.
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include <cmath>
#include <string>

#include "src/cuda/api.hpp"
#include "src/cuda/attention/bwd_args.hpp"
#include "src/cuda/attention/tma_checks.hpp"

namespace attnkit::cuda {
namespace attn {
template <class Element, int kHeadDim>
cudaError_t launch_attention_bwd(const AttnBwdArgs& a);
}  // namespace attn

namespace {

// Where each fp32 buffer of the backward lives in the caller's workspace (byte offsets).
struct BwdWorkspace {
  int rows_padded = 0;
  size_t lse2 = 0, delta = 0, dq_accum = 0, dk_accum = 0, dv_accum = 0, semaphore = 0, total = 0;
  explicit BwdWorkspace(const AttentionBwdParams& p) {
    const bool varlen = p.cu_seqlens_q.defined();
    const int o = varlen ? 0 : 1;
    const int64_t sq = p.q.size(o), sk = p.k.size(o), hq = p.q.size(o + 1), hkv = p.k.size(o + 1), d = p.q.size(-1);
    const int64_t batch = varlen ? p.cu_seqlens_q.size(0) - 1 : p.q.size(0);
    const int64_t m = kBwdBlockM;
    rows_padded = static_cast<int>(varlen ? (sq + batch * m + m - 1) / m * m : batch * ((sq + m - 1) / m) * m);
    const int64_t rows_k = varlen ? sk : batch * sk;
    auto take = [&](int64_t bytes) {
      const size_t at = total;
      total += (static_cast<size_t>(bytes) + 255) / 256 * 256;
      return at;
    };
    lse2 = take(hq * rows_padded * 4);
    delta = take(hq * rows_padded * 4);
    dq_accum = take(hq * rows_padded * d * 4);
    if (p.deterministic) semaphore = take(hq * rows_padded / m * 4);
    if (hq != hkv) {
      const int64_t heads = p.deterministic || p.gqa_reduction == GqaReduction::kSplit ? hq : hkv;
      dk_accum = take(rows_k * heads * d * 4);
      dv_accum = take(rows_k * heads * d * 4);
    }
  }
};

template <class Element>
cudaError_t launch_for_head_dim(int d, const AttnBwdArgs& a) {
  return d == 64 ? attn::launch_attention_bwd<Element, 64>(a) : attn::launch_attention_bwd<Element, 128>(a);
}

}  // namespace

size_t attention_backward_workspace_size(const AttentionBwdParams& p) { return BwdWorkspace(p).total; }

Status attention_backward(const AttentionBwdParams& p) {
  if (p.q.dtype != DType::kBFloat16 && p.q.dtype != DType::kFloat16)
    return Unsupported(std::string("q: the CUDA kernels take bfloat16 or float16, got ") + dtype_name(p.q.dtype));
  const int64_t D = p.q.size(-1);
  if ((D != 64 && D != 128) || p.v.size(-1) != D)
    return Unsupported("q: the CUDA backward supports head dims D = Dv in {64, 128} so far, got D = " + std::to_string(D) +
                       ", Dv = " + std::to_string(p.v.size(-1)));
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"},
                         std::pair{&p.dout, "dout"}, std::pair{&p.dq, "dq"}, std::pair{&p.dk, "dk"}, std::pair{&p.dv, "dv"}})
    ATTNKIT_RETURN_IF_ERROR(check_tma_operand(*t, name));
  const bool varlen = p.cu_seqlens_q.defined();
  const int o = varlen ? 0 : 1;
  AttnBwdArgs a;
  a.q = p.q.data;
  a.k = p.k.data;
  a.v = p.v.data;
  a.out = p.out.data;
  a.dout = p.dout.data;
  a.lse = static_cast<const float*>(p.lse.data);
  a.dq = p.dq.data;
  a.dk = p.dk.data;
  a.dv = p.dv.data;
  auto strides = [&](const TensorView& t, int64_t (&s)[3]) {
    s[0] = varlen ? 0 : t.strides[0];
    s[1] = t.strides[o];
    s[2] = t.strides[o + 1];
  };
  strides(p.q, a.q_stride);
  strides(p.k, a.k_stride);
  strides(p.v, a.v_stride);
  strides(p.out, a.o_stride);
  strides(p.dout, a.do_stride);
  strides(p.dq, a.dq_stride);
  strides(p.dk, a.dk_stride);
  strides(p.dv, a.dv_stride);
  a.lse_stride[0] = varlen ? 0 : p.lse.strides[0];
  a.lse_stride[1] = p.lse.strides[varlen ? 0 : 1];
  a.lse_stride[2] = p.lse.strides[varlen ? 1 : 2];
  a.heads_q = static_cast<int>(p.q.size(o + 1));
  a.heads_kv = static_cast<int>(p.k.size(o + 1));
  a.head_dim = static_cast<int>(D);
  a.seqlen_q = static_cast<int>(p.q.size(o));
  a.seqlen_k = static_cast<int>(p.k.size(o));
  if (varlen) {
    a.batch = static_cast<int>(p.cu_seqlens_q.size(0) - 1);
    a.cu_seqlens_q = static_cast<const int32_t*>(p.cu_seqlens_q.data);
    a.cu_seqlens_k = static_cast<const int32_t*>(p.cu_seqlens_k.data);
    if ((p.max_seqlen_q <= 0 && a.seqlen_q > 0) || (p.max_seqlen_k <= 0 && a.seqlen_k > 0))
      return InvalidArgument("max_seqlen_q, max_seqlen_k: the CUDA kernels need the longest lengths (> 0) for varlen input");
    a.max_seqlen_q = static_cast<int>(p.max_seqlen_q);
    a.max_seqlen_k = static_cast<int>(p.max_seqlen_k);
  } else {
    a.batch = static_cast<int>(p.q.size(0));
    a.max_seqlen_q = a.seqlen_q;
    a.max_seqlen_k = a.seqlen_k;
  }
  if (a.batch > 65535)
    return Unsupported("cu_seqlens_q: the CUDA backward takes at most 65535 sequences per call, got " + std::to_string(a.batch));
  a.scale = static_cast<float>(p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(D)));
  a.softcap = static_cast<float>(p.softcap);
  a.mask = p.mask;
  a.deterministic = p.deterministic;
  a.split_dkv = p.deterministic || p.gqa_reduction == GqaReduction::kSplit;
  a.stream = p.stream;

  const BwdWorkspace ws(p);
  if (reinterpret_cast<uintptr_t>(p.workspace.data) % 256 != 0)
    return InvalidArgument("workspace: the CUDA backward needs a 256-byte aligned device pointer");
  char* base = static_cast<char*>(p.workspace.data);
  a.rows_padded = ws.rows_padded;
  a.lse2 = reinterpret_cast<float*>(base + ws.lse2);
  a.delta = reinterpret_cast<float*>(base + ws.delta);
  a.dq_accum = reinterpret_cast<float*>(base + ws.dq_accum);
  if (p.deterministic) a.dq_semaphore = reinterpret_cast<int*>(base + ws.semaphore);
  if (a.heads_q != a.heads_kv) {
    a.dk_accum = reinterpret_cast<float*>(base + ws.dk_accum);
    a.dv_accum = reinterpret_cast<float*>(base + ws.dv_accum);
  }
  const cudaError_t err = p.q.dtype == DType::kBFloat16 ? launch_for_head_dim<cutlass::bfloat16_t>(static_cast<int>(D), a)
                                                        : launch_for_head_dim<cutlass::half_t>(static_cast<int>(D), a);
  if (err != cudaSuccess) return {StatusCode::kBackendError, std::string("attention_backward: ") + cudaGetErrorString(err)};
  return Status::Ok();
}

}  // namespace attnkit::cuda
