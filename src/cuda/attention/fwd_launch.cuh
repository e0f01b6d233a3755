// src/cuda/attention/fwd_launch.cuh — host side of one forward instantiation: TMA descriptors over
// the caller's strided tensors, grid, shared memory, launch. Shared by the variants
// (fwd_variant.cuh): softmax attention here, flex attention in src/cuda/flex/.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "src/cuda/attention/fwd_kernel.cuh"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda::attn {

template <class Element, int kHeadDim, class Variant>
cudaError_t launch_fwd(const AttnFwdArgs& a, const typename Variant::Args& extra) {
  using T = FwdTraits<Element, kHeadDim>;
  const bool varlen = a.cu_seqlens_q != nullptr;
  const int batch_dim = varlen ? 1 : a.batch;
  // A varlen tensor has no batch dim; give TMA a harmless non-zero stride for the unit one.
  auto bstride = [&](const int64_t* s, int len) { return varlen ? s[1] * int64_t(len > 0 ? len : 1) : s[0]; };
  FwdParams<T, Variant> p;
  p.args = a;
  p.extra = extra;
  p.args.num_m_blocks = (a.max_seqlen_q + T::kBlockM - 1) / T::kBlockM;
  const int64_t tiles = int64_t(p.args.num_m_blocks) * a.heads_q * a.batch * num_splits_of(extra);
  if (tiles == 0) return cudaSuccess;  // no query rows: nothing to write (and no TMA descriptor of an empty dim)
  if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  p.args.num_tiles = static_cast<int>(tiles);
  // No keys (Sk = 0): every row is empty and no key tile is loaded, but a TMA descriptor needs
  // extents >= 1 (the driver refuses 0), as in bwd_launch.cuh.
  p.shape_q = make_shape(a.seqlen_q, kHeadDim, a.heads_q, batch_dim);
  p.shape_k = make_shape(std::max(a.seqlen_k, 1), kHeadDim, a.heads_kv, batch_dim);
  p.shape_vt = make_shape(kHeadDim, std::max(a.seqlen_k, 1), a.heads_kv, batch_dim);
  Tensor mQ = make_tensor(make_gmem_ptr(static_cast<Element const*>(a.q)), p.shape_q,
                          make_stride(a.q_stride[1], _1{}, a.q_stride[2], bstride(a.q_stride, a.seqlen_q)));
  Tensor mK = make_tensor(make_gmem_ptr(static_cast<Element const*>(a.k)), p.shape_k,
                          make_stride(a.k_stride[1], _1{}, a.k_stride[2], bstride(a.k_stride, a.seqlen_k)));
  Tensor mVt = make_tensor(make_gmem_ptr(static_cast<Element const*>(a.v)), p.shape_vt,
                           make_stride(_1{}, a.v_stride[1], a.v_stride[2], bstride(a.v_stride, a.seqlen_k)));
  p.tma_q = make_tma_copy(SM90_TMA_LOAD{}, mQ, typename T::SmemLayoutQ{}, Shape<Int<T::kBlockM>, Int<kHeadDim>>{}, _1{});
  p.tma_k = make_tma_copy(SM90_TMA_LOAD{}, mK, take<0, 2>(typename T::SmemLayoutK{}), Shape<Int<T::kBlockN>, Int<kHeadDim>>{}, _1{});
  p.tma_v = make_tma_copy(SM90_TMA_LOAD{}, mVt, take<0, 2>(typename T::SmemLayoutVt{}), Shape<Int<kHeadDim>, Int<T::kBlockN>>{}, _1{});

  Variant::set_tile_order(p.args, extra);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(tiles, a.num_sms)));  // persistent CTAs
  // The dynamic scheduler's counter starts at 0 on every launch (a memset node under graph capture).
  cudaError_t err0 = cudaMemsetAsync(a.tile_counter, 0, sizeof(int), static_cast<cudaStream_t>(a.stream));
  if (err0 != cudaSuccess) return err0;
  auto kernel = attention_fwd_kernel<T, Variant>;
  const cudaError_t smem_ok = ensure_dynamic_smem<attention_fwd_kernel<T, Variant>>(T::kSmemBytes);
  if (smem_ok != cudaSuccess) return smem_ok;
  kernel<<<grid, T::kThreads, T::kSmemBytes, static_cast<cudaStream_t>(a.stream)>>>(p);
  return cudaGetLastError();
}

template <class Element, int kHeadDim>
cudaError_t launch_attention_fwd(const AttnFwdArgs& a) {
  return launch_fwd<Element, kHeadDim, DenseVariant>(a, {});
}

}  // namespace attnkit::cuda::attn
