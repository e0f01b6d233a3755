// src/cuda/attention/dispatch_common.hpp — what the forward and backward dispatchers share: the
// GPU-only checks on dtype and head dim, and the args fields both kernels take from the op's
// params (pointers to q/k/v, strides, heads, lengths, varlen, scale, softcap, mask, stream).
#pragma once
#include <cmath>
#include <initializer_list>
#include <string>

#include "attnkit/status.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::cuda {

inline Status check_dtype_and_head_dim(const TensorView& q, const TensorView& v, std::initializer_list<int> head_dims,
                                       const char* which) {
  if (q.dtype != DType::kBFloat16 && q.dtype != DType::kFloat16)
    return Unsupported(std::string("q: the CUDA kernels take bfloat16 or float16, got ") + dtype_name(q.dtype));
  const int64_t d = q.size(-1);
  bool ok = v.size(-1) == d, listed = false;
  std::string list;
  for (int h : head_dims) {
    listed = listed || h == d;
    list += (list.empty() ? "" : ", ") + std::to_string(h);
  }
  if (!ok || !listed)
    return Unsupported(std::string("q: ") + which + " needs head dims D = Dv in {" + list + "}, got D = " + std::to_string(d) +
                       ", Dv = " + std::to_string(v.size(-1)));
  return Status::Ok();
}

// (batch, seq, head) strides of a [B, S, H, D] tensor, or (0, token, head) of a packed [T, H, D] one.
inline void bsh_strides(const TensorView& t, bool varlen, int64_t (&s)[3]) {
  const int o = varlen ? 0 : 1;
  s[0] = varlen ? 0 : t.strides[0];
  s[1] = t.strides[o];
  s[2] = t.strides[o + 1];
}

// (batch, head, seq) strides of LSE [B, H, S], or (0, head, token) of a packed [H, T] one.
inline void lse_strides(const TensorView& t, bool varlen, int64_t (&s)[3]) {
  s[0] = varlen ? 0 : t.strides[0];
  s[1] = t.strides[varlen ? 0 : 1];
  s[2] = t.strides[varlen ? 1 : 2];
}

// The fields AttnFwdArgs and AttnBwdArgs share. max_seqlen_q must be given for varlen input.
template <class Args, class Params>
Status fill_shared_args(const Params& p, Args& a) {
  const bool varlen = p.cu_seqlens_q.defined();
  const int o = varlen ? 0 : 1;
  a.q = p.q.data;
  a.k = p.k.data;
  a.v = p.v.data;
  bsh_strides(p.q, varlen, a.q_stride);
  bsh_strides(p.k, varlen, a.k_stride);
  bsh_strides(p.v, varlen, a.v_stride);
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
  a.scale = static_cast<float>(p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.q.size(-1))));
  a.softcap = static_cast<float>(p.softcap);
  a.mask = p.mask;
  a.stream = p.stream;
  return Status::Ok();
}

}  // namespace attnkit::cuda
