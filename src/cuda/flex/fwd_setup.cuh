// src/cuda/flex/fwd_setup.cuh — FlexFwdParams -> the forward kernel's arguments, shared by the
// catalog's dispatch (fwd_dispatch.cu) and the instantiation with your own functors
// (attnkit/cuda/flex_cuda.cuh): q/k/v/out [B, H, S, D] as the kernel's (batch, seq, head) strides,
// and torch's BlockMask tensors as key-tile lists. Host code; params already validated.
#pragma once
#include <cutlass/numeric_types.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "attnkit/flex.hpp"
#include "src/cuda/attention/dispatch_common.hpp"
#include "src/cuda/cuda_status.hpp"
#include "src/cuda/attention/fwd_traits.cuh"
#include "src/cuda/attention/tma_checks.hpp"
#include "src/cuda/flex/fwd_variant.cuh"
#include "src/cuda/flex/split_combine.cuh"
#include "src/cuda/flex/split_plan.hpp"
#include "src/cuda/runtime.hpp"

namespace attnkit::cuda::flex {

// Key tile width of the forward kernel at head dim d (FwdTraits::kBlockN; split_plan.hpp's
// host-only copy must agree).
inline int key_tile_width(int64_t d) {
  static_assert(attn::FwdTraits<cutlass::bfloat16_t, 64>::kBlockN == key_tile_width_of(64));
  static_assert(attn::FwdTraits<cutlass::bfloat16_t, 128>::kBlockN == key_tile_width_of(128));
  static_assert(attn::FwdTraits<cutlass::bfloat16_t, 256>::kBlockN == key_tile_width_of(256));
  return key_tile_width_of(d);
}

// A BlockMask list with broadcast B / H dims given stride 0.
inline BlockList block_list(const TensorView& num, const TensorView& index) {
  BlockList l;
  l.num = static_cast<const int32_t*>(num.data);
  l.index = static_cast<const int32_t*>(index.data);
  for (int d = 0; d < 3; ++d) l.num_stride[d] = d < 2 && num.size(d) == 1 ? 0 : num.stride(d);
  for (int d = 0; d < 4; ++d) l.index_stride[d] = d < 2 && index.size(d) == 1 ? 0 : index.stride(d);
  return l;
}

// The BlockMask's lists into f (FlexArgs of any functors); nothing without a BlockMask.
template <class Args>
Status set_block_mask(const BlockMaskView& m, int64_t d, Args& f) {
  if (!m.defined()) return Status::Ok();
  constexpr int kBlockM = attn::FwdTraits<cutlass::bfloat16_t, 128>::kBlockM;
  const int bn = key_tile_width(d);
  if (m.block_q != kBlockM)
    return Unsupported("block_mask.block_q: the CUDA flex forward needs BLOCK_SIZE " + std::to_string(kBlockM) +
                       " on the query side (torch's default), got " + std::to_string(m.block_q));
  if (m.block_k % bn != 0)
    return Unsupported("block_mask.block_k: the CUDA flex forward needs a multiple of " + std::to_string(bn) +
                       " at head dim " + std::to_string(d) + ", got " + std::to_string(m.block_k));
  f.block_mask = true;
  f.tiles_per_block = static_cast<int>(m.block_k / bn);
  f.partial = block_list(m.kv_num_blocks, m.kv_indices);
  if (m.full_kv_num_blocks.defined()) f.full = block_list(m.full_kv_num_blocks, m.full_kv_indices);
  return Status::Ok();
}

// (batch, seq, head) strides of a [B, H, S, D] tensor.
inline void bsh_of_bhsd(const TensorView& t, int64_t (&s)[3]) {
  s[0] = t.stride(0);
  s[1] = t.stride(2);
  s[2] = t.stride(1);
}

// The GPU-only checks (dtype, head dim, TMA-able operands, lengths, workspace alignment) and the
// kernel arguments that do not depend on the functors.
inline Status fill_fwd_args(const FlexFwdParams& p, AttnFwdArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(check_dtype_and_head_dim(p.q, p.v, {64, 128, 256}, "the CUDA flex forward"));
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"}})
    ATTNKIT_RETURN_IF_ERROR(check_tma_operand(*t, name));
  for (auto [n, name] : {std::pair{p.q.size(2), "q (Sq)"}, std::pair{p.k.size(2), "k (Sk)"}})
    if (n > INT32_MAX / 2) return Unsupported(std::string(name) + ": the CUDA flex forward takes sequences below 2^30");
  a.q = p.q.data;
  a.k = p.k.data;
  a.v = p.v.data;
  a.out = p.out.data;
  bsh_of_bhsd(p.q, a.q_stride);
  bsh_of_bhsd(p.k, a.k_stride);
  bsh_of_bhsd(p.v, a.v_stride);
  bsh_of_bhsd(p.out, a.o_stride);
  if (p.lse.defined()) {
    a.lse = static_cast<float*>(p.lse.data);
    lse_strides(p.lse, false, a.lse_stride);
  }
  a.batch = static_cast<int>(p.q.size(0));
  a.heads_q = static_cast<int>(p.q.size(1));
  a.heads_kv = static_cast<int>(p.k.size(1));
  a.seqlen_q = a.max_seqlen_q = static_cast<int>(p.q.size(2));
  a.seqlen_k = static_cast<int>(p.k.size(2));
  a.scale = static_cast<float>(p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.q.size(3))));
  fold_scale_sign_into_q(a);
  a.stream = p.stream;
  a.tile_counter = static_cast<int*>(p.workspace.data);  // validated: >= 16 bytes
  if (reinterpret_cast<uintptr_t>(a.tile_counter) % alignof(int) != 0)
    return InvalidArgument("workspace: expected a 4-byte aligned device pointer");
  a.num_sms = current_device_sm_count();
  return Status::Ok();
}

// The short-query path (split_plan.hpp): GQA packing where pack_gqa (the caller then launches the
// packed instantiation when f.pack_heads > 1) — the kernel sees Hkv heads of g * Sq rows, each a
// view of the group's stacked query rows — and the split-KV fields of f (how many parts, their
// buffers in the workspace). The parts' flat row index ((split, b, head) * rows + row)
// is the same packed or not, so the combine step reads them by (b, Hq, Sq) either way.
template <class Args>
Status set_short_query_path(const FlexFwdParams& p, AttnFwdArgs& a, Args& f, bool pack_gqa) {
  if (p.num_splits > 1 && p.q.size(2) > kMaxSplitQueries)
    return Unsupported("num_splits: split-KV is the short-query path (Sq <= " + std::to_string(kMaxSplitQueries) +
                       "), got Sq = " + std::to_string(p.q.size(2)));
  static_assert(attn::FwdTraits<cutlass::bfloat16_t, 64>::kBlockM == kQueryTileRows);
  static_assert(attn::FwdTraits<cutlass::bfloat16_t, 128>::kBlockM == kQueryTileRows);
  static_assert(attn::FwdTraits<cutlass::bfloat16_t, 256>::kBlockM == kQueryTileRows);
  if (const int g = pack_gqa ? packed_query_heads(p) : 1; g > 1) {
    const int64_t sq = p.q.size(2);
    // Packed row r = j * Sq + i sits at j * (head stride) + i * (seq stride) = r * (seq stride),
    // or at r * (head stride) when Sq = 1 (its seq stride is arbitrary).
    const auto row_stride = [sq](const TensorView& t) { return sq == 1 ? t.stride(1) : t.stride(2); };
    a.heads_q = a.heads_kv;
    a.seqlen_q = a.max_seqlen_q = static_cast<int>(g * sq);
    a.q_stride[1] = row_stride(p.q);
    a.q_stride[2] = g * p.q.stride(1);
    a.o_stride[1] = row_stride(p.out);
    a.o_stride[2] = g * p.out.stride(1);
    if (p.lse.defined()) {
      a.lse_stride[1] = g * p.lse.stride(1);
      a.lse_stride[2] = row_stride(p.lse);
    }
    f.pack_heads = g;
    f.pack_rows = static_cast<int>(sq);
    f.pack_divider = RowDivider::of(sq);
  }
  const SplitPlan plan = plan_splits(p, a.num_sms, pack_gqa);  // at most what flex_forward_workspace_size() sized
  f.num_splits = plan.splits;
  if (plan.splits == 1) return Status::Ok();
  char* ws = static_cast<char*>(p.workspace.data);
  if (reinterpret_cast<uintptr_t>(ws) % 16 != 0)
    return InvalidArgument("workspace: the split-KV path needs a 16-byte aligned device pointer");
  f.partial_out = reinterpret_cast<float*>(ws + plan.partial_out_offset);
  f.partial_lse = reinterpret_cast<float*>(ws + plan.partial_lse_offset);
  return Status::Ok();
}

// Runs the forward kernel (launch()), then with split-KV the combine step into out / lse.
template <class Element, class Args, class Launch>
Status run_forward(const FlexFwdParams& p, const AttnFwdArgs& a, const Args& f, Launch&& launch, const char* op) {
  cudaError_t err = launch();
  if (err == cudaSuccess && f.num_splits > 1) {
    SplitCombineArgs c;
    c.partial_out = f.partial_out;
    c.partial_lse = f.partial_lse;
    c.out = p.out.data;
    c.lse = a.lse;
    for (int d = 0; d < 3; ++d) {
      c.out_stride[d] = p.out.stride(d);
      c.lse_stride[d] = p.lse.defined() ? p.lse.stride(d) : 0;
    }
    c.rows = p.q.size(0) * p.q.size(1) * p.q.size(2);  // (b, Hq, Sq): unpacked (set_short_query_path)
    c.heads = static_cast<int>(p.q.size(1));
    c.seqlen_q = static_cast<int>(p.q.size(2));
    c.head_dim = static_cast<int>(p.out.size(3));
    c.splits = f.num_splits;
    err = launch_split_combine<Element>(c, static_cast<cudaStream_t>(a.stream));
  }
  return cuda_status(err, op);
}

}  // namespace attnkit::cuda::flex
