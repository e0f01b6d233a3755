// src/cuda/flex/bwd_setup.cuh — FlexBwdParams -> the backward kernel's arguments: the softmax
// attention backward's buffers (bwd_workspace.hpp) and, with a BlockMask, the query tile lists
// (bwd_lists.cuh) in the workspace after them. Host code; params already validated.
#pragma once
#include <cutlass/numeric_types.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "attnkit/flex.hpp"
#include "src/cuda/attention/bwd_traits.cuh"
#include "src/cuda/attention/bwd_workspace.hpp"
#include "src/cuda/attention/dispatch_common.hpp"
#include "src/cuda/cuda_status.hpp"
#include "src/cuda/runtime.hpp"
#include "src/cuda/attention/tma_checks.hpp"
#include "src/cuda/flex/bwd_lists.cuh"
#include "src/cuda/flex/bwd_variant.cuh"
#include "src/cuda/flex/fwd_setup.cuh"

namespace attnkit::cuda::flex {

// Key tile width of the backward kernel at head dim d (BwdTraits::kBlockN).
inline int bwd_key_tile_width(int64_t d) { return d <= 128 ? 128 : 64; }
static_assert(attn::BwdTraits<cutlass::bfloat16_t, 128>::kBlockN == 128 && attn::BwdTraits<cutlass::bfloat16_t, 256>::kBlockN == 64);

// Where everything lives in the workspace: the attention backward's buffers, then the lists.
struct FlexBwdPlan {
  BwdWorkspace ws;
  bool lists = false;
  int bm = 1, hm = 1, nq = 0, nk = 0, m_tiles = 0;
  size_t cells = 0, num = 0, tiles = 0, turns = 0;

  static BwdShape shape_of(const FlexBwdParams& p) {
    BwdShape s;
    s.batch = p.q.size(0);
    s.heads_q = p.q.size(1);
    s.heads_kv = p.k.size(1);
    s.sq = p.q.size(2);
    s.sk = p.k.size(2);
    s.head_dim = p.q.size(3);
    s.ordered_dq = s.split_dkv = p.deterministic;
    return s;
  }
  explicit FlexBwdPlan(const FlexBwdParams& p) : ws(shape_of(p)) {
    const BlockMaskView& m = p.block_mask;
    if (!m.defined() || m.block_q <= 0 || m.block_k <= 0) return;
    lists = true;
    bm = static_cast<int>(m.kv_num_blocks.size(0));
    hm = static_cast<int>(m.kv_num_blocks.size(1));
    nq = static_cast<int>((p.q.size(2) + m.block_q - 1) / m.block_q);
    nk = static_cast<int>((p.k.size(2) + m.block_k - 1) / m.block_k);
    m_tiles = static_cast<int>((p.q.size(2) + kBwdBlockM - 1) / kBwdBlockM);
    const int64_t bh = int64_t(bm) * hm;
    cells = ws.take(bh * nq * nk * 4);
    num = ws.take(bh * nk * 4);
    tiles = ws.take(bh * nk * m_tiles * 4);
    turns = ws.take(bh * nk * m_tiles * 4);
  }
};

// The GPU-only checks and the kernel arguments that do not depend on the functors.
inline Status fill_bwd_args(const FlexBwdParams& p, AttnBwdArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(check_dtype_and_head_dim(p.q, p.v, {64, 128, 256}, "the CUDA flex backward"));
  ATTNKIT_RETURN_IF_ERROR(check_bwd_tma_operands(p));
  for (auto [n, name] : {std::pair{p.q.size(2), "q (Sq)"}, std::pair{p.k.size(2), "k (Sk)"}})
    if (n > INT32_MAX / 2) return Unsupported(std::string(name) + ": the CUDA flex backward takes sequences below 2^30");
  if (p.q.size(0) > 65535 || p.q.size(1) > 65535)
    return Unsupported("q: the CUDA flex backward takes at most 65535 batches and heads");
  a.q = p.q.data;
  a.k = p.k.data;
  a.v = p.v.data;
  a.out = p.out.data;
  a.dout = p.dout.data;
  a.lse = static_cast<const float*>(p.lse.data);
  a.dq = p.dq.data;
  a.dk = p.dk.data;
  a.dv = p.dv.data;
  bsh_of_bhsd(p.q, a.q_stride);
  bsh_of_bhsd(p.k, a.k_stride);
  bsh_of_bhsd(p.v, a.v_stride);
  bsh_of_bhsd(p.out, a.o_stride);
  bsh_of_bhsd(p.dout, a.do_stride);
  bsh_of_bhsd(p.dq, a.dq_stride);
  bsh_of_bhsd(p.dk, a.dk_stride);
  bsh_of_bhsd(p.dv, a.dv_stride);
  lse_strides(p.lse, false, a.lse_stride);
  a.batch = static_cast<int>(p.q.size(0));
  a.heads_q = static_cast<int>(p.q.size(1));
  a.heads_kv = static_cast<int>(p.k.size(1));
  a.head_dim = static_cast<int>(p.q.size(3));
  a.seqlen_q = a.max_seqlen_q = static_cast<int>(p.q.size(2));
  a.seqlen_k = a.max_seqlen_k = static_cast<int>(p.k.size(2));
  a.scale = static_cast<float>(p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.q.size(3))));
  a.ordered_dq = a.split_dkv = p.deterministic;  // deterministic: dQ in key-tile order, GQA sums in head order
  // With a BlockMask, the first writer of each query tile stores at any length (the claims; no
  // zeroing pass): few key tiles meet a query tile of a sparse mask, and at half density (causal)
  // the claims cost nothing either (H100, S16k: sliding window -3.2%, documents -2.6%, causal and
  // ALiBi +-0; without a BlockMask +0.9%, so the softmax rule stays; docs/perf/flex_bwd.md).
  a.fast_dram = current_device_fast_dram();
  a.dq_zeroed = dq_zeroed_rule(a.ordered_dq, a.max_seqlen_k, /*masked=*/true, a.head_dim, a.fast_dram) && !p.block_mask.defined();
  a.dq_after_heads = true;  // the dq conversion beside the main kernel's tail (bwd_launch.cuh)
  a.num_sms = current_device_sm_count();  // the launch order's rule (launch_order.hpp)
  a.stream = p.stream;
  if (reinterpret_cast<uintptr_t>(p.workspace.data) % 256 != 0)
    return InvalidArgument("workspace: the CUDA flex backward needs a 256-byte aligned device pointer");
  const FlexBwdPlan plan(p);
  if (!plan.ws.fits_32_bits()) return Unsupported(too_many_rows_message(plan.ws, "the CUDA flex backward"));
  plan.ws.carve(static_cast<char*>(p.workspace.data), a);
  return Status::Ok();
}

// The BlockMask's lists into f (FlexBwdArgs of any functors) and the kernels that build them on
// `stream` (the backward's preprocess then overlaps them: a); nothing without a BlockMask.
template <class Args>
Status set_bwd_block_mask(const FlexBwdParams& p, Args& f, AttnBwdArgs& a) {
  const BlockMaskView& m = p.block_mask;
  if (!m.defined()) return Status::Ok();
  const int64_t d = p.q.size(3), bn = bwd_key_tile_width(d);
  if (m.block_q % kBwdBlockM != 0)
    return Unsupported("block_mask.block_q: the CUDA flex backward needs a multiple of " + std::to_string(kBwdBlockM) +
                       ", got " + std::to_string(m.block_q));
  if (m.block_k % bn != 0)
    return Unsupported("block_mask.block_k: the CUDA flex backward needs a multiple of " + std::to_string(bn) +
                       " at head dim " + std::to_string(d) + ", got " + std::to_string(m.block_k));
  const FlexBwdPlan plan(p);
  char* ws = static_cast<char*>(p.workspace.data);
  QueryTileLists& l = f.lists;
  l.num = reinterpret_cast<int32_t*>(ws + plan.num);
  l.tiles = reinterpret_cast<int32_t*>(ws + plan.tiles);
  l.turns = reinterpret_cast<int32_t*>(ws + plan.turns);
  l.bm = plan.bm;
  l.hm = plan.hm;
  l.nk = plan.nk;
  l.m_tiles = plan.m_tiles;
  f.block_mask = true;
  f.tiles_per_block = static_cast<int>(m.block_k / bn);
  ListBuildArgs x;
  x.partial = block_list(m.kv_num_blocks, m.kv_indices);
  if (m.full_kv_num_blocks.defined()) x.full = block_list(m.full_kv_num_blocks, m.full_kv_indices);
  x.nq = plan.nq;
  x.q_sub = static_cast<int>(m.block_q / kBwdBlockM);
  x.partial_first = !p.deterministic;  // (block_lists.hpp: the ordered dQ needs one order)
  x.cells = reinterpret_cast<int32_t*>(ws + plan.cells);
  x.out = l;
  a.preprocess_after_trigger = builds_lists(x);
  const cudaError_t err = build_query_tile_lists(x, static_cast<cudaStream_t>(p.stream));
  return cuda_status(err, "flex_attention_backward");
}

}  // namespace attnkit::cuda::flex
