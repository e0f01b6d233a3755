// src/cuda/attention/fwd_args.hpp — what the host hands the forward kernel: raw pointers, strides
// (in elements), sizes and the runtime options. Plain data, no CUDA or CuTe types.
#pragma once
#include <cstdint>

#include "attnkit/semantics/mask.hpp"

namespace attnkit::cuda {

struct AttnFwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // may be null
  // Strides of (batch, seq, head) for q, k, v, out; varlen tensors have batch stride 0.
  int64_t q_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {}, o_stride[3] = {};
  int64_t lse_stride[3] = {};  // (batch, head, seq); varlen: (0, head, token)
  int batch = 0;               // number of sequences
  int seqlen_q = 0, seqlen_k = 0;  // dense lengths, or the packed totals when varlen
  int max_seqlen_q = 0;            // longest query sequence (== seqlen_q when dense)
  int num_m_blocks = 0;            // query tiles per (batch, head): ceil(max_seqlen_q / kBlockM)
  int num_tiles = 0;               // num_m_blocks * heads_q * batch
  int* tile_counter = nullptr;     // device int in the caller's workspace, zeroed by each launch
  int heads_per_group_log2 = 0;    // tile order (launch_order.hpp); set by launch_fwd
  int tail_m_blocks = 0;           // flex's tile order (launch_order.hpp, fwd_tile_at_short_tail)
  int heads_q = 0, heads_kv = 0;
  const int32_t* cu_seqlens_q = nullptr;  // device pointers, both set for varlen
  const int32_t* cu_seqlens_k = nullptr;
  float scale = 1.f;     // > 0 (fold_scale_sign_into_q)
  float q_factor = 1.f;  // -1 or 0 for a caller's scale < 0 or 0: Q's tile times this in shared memory
  float softcap = 0.f;   // 0: off
  MaskOptions mask;
  void* stream = nullptr;
  int num_sms = 132;
};

// The kernels keep the scores unscaled where they can and fold the scale into the softmax's
// exponent: its running max is then the largest score and a masked score (-inf) gives 0, both
// only for a positive scale. A caller's scale <= 0 is therefore carried by Q: the consumers
// multiply their Q tile by q_factor (-1 or 0) in shared memory, and the kernel's scale is |scale|
// (1 for 0): the same scaled scores, scale * q.k, whatever the score mod.
inline void fold_scale_sign_into_q(AttnFwdArgs& a) {
  if (a.scale > 0.f) return;
  a.q_factor = a.scale < 0.f ? -1.f : 0.f;
  a.scale = a.scale < 0.f ? -a.scale : 1.f;
}

}  // namespace attnkit::cuda
