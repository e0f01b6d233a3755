// src/cuda/attention/bwd_launch.cuh — host side of one backward instantiation: zero the GQA
// buffers (atomic reduction only), preprocess (which also zeroes the dQ semaphores and head counts; where
// preprocess_sms_rule says, on a few SMs beside the main kernel's start), main kernel over (key
// tile, query head, sequence), postprocess (the dq conversion beside the main kernel's tail).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "src/cuda/attention/bwd_kernel.cuh"
#include "src/cuda/attention/bwd_prepost.cuh"
#include "src/cuda/programmatic_launch.cuh"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda::attn {

// The backward with any variant (bwd_variant.cuh); `extra` is its own parameters.
template <class Element, int kHeadDim, class Variant>
cudaError_t launch_bwd(const AttnBwdArgs& args, const typename Variant::Args& extra) {
  using T = BwdTraits<Element, kHeadDim>;
  const int n_blocks = (args.max_seqlen_k + T::kBlockN - 1) / T::kBlockN;
  const int max_rows = (args.max_seqlen_q + T::kBlockM - 1) / T::kBlockM * T::kBlockM;
  AttnBwdArgs a = args;
  a.dq_after_heads = args.dq_after_heads && n_blocks > 0 && max_rows > 0;  // both kernels run
  const bool work_differs = mask_varies_work(a.mask) || Variant::key_tiles_differ(extra);
  if (a.preprocess_sms < 0)
    a.preprocess_sms = preprocess_sms_rule(a.num_sms, a.dq_zeroed, work_differs, a.max_seqlen_k, a.fast_dram);
  if (n_blocks == 0 || max_rows == 0) a.preprocess_sms = 0;  // (nothing to start beside)
  auto stream = static_cast<cudaStream_t>(a.stream);
  const bool varlen = a.cu_seqlens_q != nullptr;
  const bool gqa = !a.dkv_in_cta();  // dK / dV reduced over query heads in fp32 buffers
  const int64_t rows_k = varlen ? a.seqlen_k : int64_t(a.batch) * a.seqlen_k;
  cudaError_t err = cudaSuccess;  // the dQ semaphores are zeroed by the preprocess kernel
  const bool zero_dkv = gqa && !a.split_dkv;
  if (zero_dkv) {
    const size_t bytes = rows_k * a.heads_kv * kHeadDim * sizeof(float);
    err = cudaMemsetAsync(a.dk_accum, 0, bytes, stream);
    if (err == cudaSuccess) err = cudaMemsetAsync(a.dv_accum, 0, bytes, stream);
  }
  if (err != cudaSuccess) return err;
  if (a.batch == 0 || a.heads_q == 0) return cudaSuccess;

  if (a.preprocess_sms > 0) err = cudaMemsetAsync(a.preprocessed_tiles, 0, size_t(a.batch) * a.heads_q * sizeof(int), stream);
  if (err != cudaSuccess) return err;
  if (max_rows > 0) {
    // (After a memset the kernel ahead is not the one that allows an early start.)
    const bool early = a.preprocess_after_trigger && !zero_dkv && a.preprocess_sms == 0;
    // (tile x head, sequence), heads fastest; tiles x heads < 2^31: q itself would be terabytes first.
    const dim3 grid(unsigned(max_rows / T::kBlockM) * a.heads_q, a.batch);
    if (a.preprocess_sms > 0) {
      err = ensure_dynamic_smem<attention_bwd_preprocess_beside_kernel<Element, kHeadDim>>(kPreprocessBesideSmem);
      if (err == cudaSuccess) {
        attention_bwd_preprocess_beside_kernel<Element, kHeadDim>
            <<<a.preprocess_sms, 256 * kPreprocessBesideGroups, kPreprocessBesideSmem, stream>>>(a);
        err = cudaGetLastError();  // (the main kernel would wait for its counts)
      }
    } else if (early) {
      err = launch_after_trigger(attention_bwd_preprocess_kernel<Element, kHeadDim>, grid, 256, 0, stream, a);
    } else {
      attention_bwd_preprocess_kernel<Element, kHeadDim><<<grid, 256, 0, stream>>>(a);
    }
    if (err != cudaSuccess) return err;
  }

  const int batch_dim = varlen ? 1 : a.batch;
  auto bstride = [&](const int64_t* s, int len) { return varlen ? s[1] * int64_t(len > 0 ? len : 1) : s[0]; };
  BwdParams<T, Variant> p;
  p.args = a;
  const int grid_heads = a.heads_q >> a.heads_per_cta_log2;  // query heads, or packed groups of them
  p.args.heads_per_group_log2 = a.ordered_dq && Variant::ordered_dq_convoys(extra)  // launch_order.hpp
                                    ? all_heads_group_log2(grid_heads)
                                    : head_group_log2(work_differs, n_blocks, grid_heads, a.num_sms);
  p.extra = extra;
  // Empty sides still get a valid TMA descriptor (never read: no query tile meets a key tile).
  p.shape_q = make_shape(std::max(a.seqlen_q, 1), kHeadDim, a.heads_q, batch_dim);
  p.shape_k = make_shape(std::max(a.seqlen_k, 1), kHeadDim, a.heads_kv, batch_dim);
  auto gmem = [&](const void* ptr, auto shape, const int64_t* s, int len) {
    return make_tensor(make_gmem_ptr(static_cast<Element const*>(ptr)), shape, make_stride(s[1], _1{}, s[2], bstride(s, len)));
  };
  p.tma_q = make_tma_copy(SM90_TMA_LOAD{}, gmem(a.q, p.shape_q, a.q_stride, a.seqlen_q), take<0, 2>(typename T::SmemLayoutQ{}),
                          Shape<Int<T::kBlockM>, Int<kHeadDim>>{}, _1{});
  p.tma_do = make_tma_copy(SM90_TMA_LOAD{}, gmem(a.dout, p.shape_q, a.do_stride, a.seqlen_q), take<0, 2>(typename T::SmemLayoutQ{}),
                           Shape<Int<T::kBlockM>, Int<kHeadDim>>{}, _1{});
  p.tma_k = make_tma_copy(SM90_TMA_LOAD{}, gmem(a.k, p.shape_k, a.k_stride, a.seqlen_k), typename T::SmemLayoutK{},
                          Shape<Int<T::kBlockN>, Int<kHeadDim>>{}, _1{});
  p.tma_v = make_tma_copy(SM90_TMA_LOAD{}, gmem(a.v, p.shape_k, a.v_stride, a.seqlen_k), typename T::SmemLayoutK{},
                          Shape<Int<T::kBlockN>, Int<kHeadDim>>{}, _1{});
  if (n_blocks > 0) {  // also with no queries: dK and dV are then written as zeros
    err = ensure_dynamic_smem<attention_bwd_kernel<T, Variant>>(T::kSmemBytes);
    if (err != cudaSuccess) return err;
    const BwdGrid g = bwd_grid(n_blocks, grid_heads, a.batch, p.args.heads_per_group_log2);
    // Beside the preprocess: starts on the SMs it leaves free, each CTA waiting for its head.
    if (a.preprocess_sms > 0)
      err = launch_after_trigger(attention_bwd_kernel<T, Variant>, dim3(g.x, g.y, g.z), T::kThreads, T::kSmemBytes, stream, p);
    else
      attention_bwd_kernel<T, Variant><<<dim3(g.x, g.y, g.z), T::kThreads, T::kSmemBytes, stream>>>(p);
    if (err != cudaSuccess) return err;
    // (The dq postprocess below may wait for this kernel's CTAs: never launch it after a failure.)
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  if (max_rows > 0) {
    // dq_after_heads: it starts once every CTA of the main kernel has (the last wave), on the SMs
    // the main kernel leaves idle, and converts each head as soon as that head's key tiles are done.
    const dim3 grid(max_rows / T::kBlockM, a.heads_q, a.batch);
    if (a.dq_after_heads) err = launch_after_trigger(attention_bwd_dq_kernel<T>, grid, 256, 0, stream, a);
    else attention_bwd_dq_kernel<T><<<grid, 256, 0, stream>>>(a);
    if (err != cudaSuccess) return err;
  }
  if (gqa && rows_k > 0) {
    const int64_t pairs = rows_k * a.heads_kv * (kHeadDim / 2);
    const int blocks = static_cast<int>(std::min<int64_t>((pairs + 255) / 256, 32 * 132));
    attention_bwd_dkv_kernel<Element><<<blocks, 256, 0, stream>>>(a, rows_k);
  }
  return cudaGetLastError();
}

template <class Element, int kHeadDim>
cudaError_t launch_attention_bwd(const AttnBwdArgs& a) {
  if (a.heads_per_cta_log2 > 0) return launch_bwd<Element, kHeadDim, PackedGqaBwdVariant>(a, {});
  return launch_bwd<Element, kHeadDim, DenseBwdVariant>(a, {});
}

}  // namespace attnkit::cuda::attn
