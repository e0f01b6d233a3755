// src/cuda/attention/bwd_dispatch.cu — AttentionBwdParams -> the backward instantiation for its
// (dtype, head dim), after the checks only the GPU path has; and the workspace it needs.
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include <cmath>
#include <string>

#include "src/cuda/api.hpp"
#include "src/cuda/attention/bwd_args.hpp"
#include "src/cuda/attention/bwd_workspace.hpp"
#include "src/cuda/cuda_status.hpp"
#include "src/cuda/attention/dispatch_common.hpp"
#include "src/cuda/attention/launch_order.hpp"  // mask_varies_work
#include "src/cuda/attention/tma_checks.hpp"
#include "src/cuda/runtime.hpp"

namespace attnkit::cuda {
namespace attn {
template <class Element, int kHeadDim>
cudaError_t launch_attention_bwd(const AttnBwdArgs& a);
}  // namespace attn

namespace {

// dQ partials added in key-tile order: for bitwise determinism only. (It was also D 256's fast
// path without a mask, 1.27x at S 8k / 16k, until the default mode's dQ writer changed: measured
// on an H100 the default is now 1.10-1.21x faster than the ordered mode there at S 2k-16k:
// docs/perf/attention_bwd.md, "D256: the default mode overtakes the ordered one".)
bool ordered_dq(const AttentionBwdParams& p) { return p.deterministic; }

// Deterministic mode: two chains of ordered dQ adds (AttnBwdArgs::dq_chains), which halve the
// wait of a head's key tiles for their turns, for one more dq_accum copy to zero and read back.
// Measured on an H100 (docs/perf/attention_bwd.md, "Two dQ chains"): at D 64 / 128 with keys >=
// 2048 the deterministic cost fell 21% -> 17% (S2k), causal 25% -> 20%, while at S512 (4 key tiles
// a head: little wait to save) the extra copy cost more than it saved; at D 256 (64-key tiles,
// twice as many turns) two chains were faster at every length, S512 included (cost 32-40% -> 8-15%).
int dq_chains(const AttentionBwdParams& p) {
  const int64_t sk = p.cu_seqlens_k.defined() ? p.max_seqlen_k : p.k.size(1);
  return p.deterministic && (p.q.size(-1) == 256 || sk >= 2048) ? 2 : 1;
}

// AttnBwdArgs::heads_per_cta_log2 for these params: the group's log2 where GQA's heads are packed in
// the CTA (kPacked; kAuto where packed_heads_rule says), else 0. (kPacked's group is checked a power
// of two by attention_backward.)
int heads_per_cta_log2(const AttentionBwdParams& p, int num_sms) {
  const bool varlen = p.cu_seqlens_q.defined();
  const int o = varlen ? 0 : 1;
  const int hq = static_cast<int>(p.q.size(o + 1)), hkv = static_cast<int>(p.k.size(o + 1));
  const int lg = group_log2(hq, hkv);
  if (lg <= 0) return 0;
  if (p.gqa_reduction == GqaReduction::kPacked) return lg;
  if (p.gqa_reduction != GqaReduction::kAuto) return 0;
  const int64_t sk = varlen ? p.max_seqlen_k : p.k.size(1);
  const int64_t block_n = bwd_block_n(static_cast<int>(p.q.size(-1)));
  const int64_t sequences = varlen ? p.cu_seqlens_q.size(0) - 1 : p.q.size(0);
  return packed_heads_rule(hq, hkv, (sk + block_n - 1) / block_n, sequences, mask_varies_work(p.mask), num_sms) ? lg : 0;
}

// GQA's per-query-head buffers (AttnBwdArgs::split_dkv): asked for, or deterministic with atomics
// the alternative (the packed layout is deterministic itself).
bool split_dkv(const AttentionBwdParams& p) { return p.gqa_reduction == GqaReduction::kSplit || p.deterministic; }

BwdShape shape_of(const AttentionBwdParams& p) {
  const bool varlen = p.cu_seqlens_q.defined();
  const int o = varlen ? 0 : 1;
  BwdShape s;
  s.batch = varlen ? p.cu_seqlens_q.size(0) - 1 : p.q.size(0);
  s.sq = p.q.size(o);
  s.sk = p.k.size(o);
  s.heads_q = p.q.size(o + 1);
  s.heads_kv = p.k.size(o + 1);
  s.head_dim = p.q.size(-1);
  s.varlen = varlen;
  s.ordered_dq = ordered_dq(p);
  s.dq_chains = dq_chains(p);
  s.split_dkv = split_dkv(p);
  s.heads_per_cta_log2 = heads_per_cta_log2(p, current_device_sm_count());
  return s;
}

template <class Element>
cudaError_t launch_for_head_dim(int d, const AttnBwdArgs& a) {
  switch (d) {
    case 64: return attn::launch_attention_bwd<Element, 64>(a);
    case 128: return attn::launch_attention_bwd<Element, 128>(a);
    default: return attn::launch_attention_bwd<Element, 256>(a);
  }
}

}  // namespace

size_t attention_backward_workspace_size(const AttentionBwdParams& p) { return BwdWorkspace(shape_of(p)).total; }

Status attention_backward(const AttentionBwdParams& caller) {
  AttentionBwdParams p = caller;
  normalize_unit_strides(p.q, p.k, p.v, p.out, p.lse, p.dout, p.dq, p.dk, p.dv);
  ATTNKIT_RETURN_IF_ERROR(check_dtype_and_head_dim(p.q, p.v, {64, 128, 256}, "the CUDA backward"));
  const int64_t D = p.q.size(-1);
  ATTNKIT_RETURN_IF_ERROR(check_bwd_tma_operands(p));
  const bool varlen = p.cu_seqlens_q.defined();
  AttnBwdArgs a;
  ATTNKIT_RETURN_IF_ERROR(fill_shared_args(p, a));
  a.out = p.out.data;
  a.dout = p.dout.data;
  a.lse = static_cast<const float*>(p.lse.data);
  a.dq = p.dq.data;
  a.dk = p.dk.data;
  a.dv = p.dv.data;
  bsh_strides(p.out, varlen, a.o_stride);
  bsh_strides(p.dout, varlen, a.do_stride);
  bsh_strides(p.dq, varlen, a.dq_stride);
  bsh_strides(p.dk, varlen, a.dk_stride);
  bsh_strides(p.dv, varlen, a.dv_stride);
  lse_strides(p.lse, varlen, a.lse_stride);
  a.head_dim = static_cast<int>(D);
  if (varlen && p.max_seqlen_k <= 0 && a.seqlen_k > 0)
    return InvalidArgument("max_seqlen_k: the CUDA kernels need the longest key length (> 0) for varlen input");
  a.max_seqlen_k = varlen ? static_cast<int>(p.max_seqlen_k) : a.seqlen_k;
  if (a.batch > 65535)
    return Unsupported("cu_seqlens_q: the CUDA backward takes at most 65535 sequences per call, got " + std::to_string(a.batch));
  a.ordered_dq = ordered_dq(p);
  a.fast_dram = current_device_fast_dram();
  a.dq_zeroed = dq_zeroed_rule(a.ordered_dq, a.max_seqlen_k, mask_varies_work(a.mask), a.head_dim, a.fast_dram);
  a.dq_after_heads = true;  // the dq conversion beside the main kernel's tail (bwd_launch.cuh)
  a.num_sms = current_device_sm_count();
  a.split_dkv = split_dkv(p);
  if (p.gqa_reduction == GqaReduction::kPacked && group_log2(a.heads_q, a.heads_kv) < 0)
    return InvalidArgument("gqa_reduction: kPacked needs the query heads per kv head to be a power of two, got " +
                           std::to_string(a.heads_q) + " / " + std::to_string(a.heads_kv));
  a.heads_per_cta_log2 = heads_per_cta_log2(p, a.num_sms);

  if (reinterpret_cast<uintptr_t>(p.workspace.data) % 256 != 0)
    return InvalidArgument("workspace: the CUDA backward needs a 256-byte aligned device pointer");
  const BwdWorkspace ws(shape_of(p));
  if (!ws.fits_32_bits()) return Unsupported(too_many_rows_message(ws, "the CUDA backward"));
  ws.carve(static_cast<char*>(p.workspace.data), a);
  const cudaError_t err = p.q.dtype == DType::kBFloat16 ? launch_for_head_dim<cutlass::bfloat16_t>(static_cast<int>(D), a)
                                                        : launch_for_head_dim<cutlass::half_t>(static_cast<int>(D), a);
  return cuda_status(err, "attention_backward");
}

}  // namespace attnkit::cuda
