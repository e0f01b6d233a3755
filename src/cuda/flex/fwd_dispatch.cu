// src/cuda/flex/fwd_dispatch.cu — FlexFwdParams -> the flex forward instantiation for its
// (dtype, head dim): q/k/v/out [B, H, S, D] as the forward kernel's (batch, seq, head) strides,
// the catalog functors, and torch's BlockMask tensors as key-tile lists.
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include <cmath>
#include <string>

#include "attnkit/semantics/flex_catalog.hpp"
#include "src/cuda/attention/dispatch_common.hpp"
#include "src/cuda/attention/fwd_traits.cuh"
#include "src/cuda/attention/tma_checks.hpp"
#include "src/cuda/flex/api.hpp"
#include "src/cuda/flex/fwd_variant.cuh"
#include "src/cuda/runtime.hpp"

namespace attnkit::cuda {
namespace attn {
template <class Element, int kHeadDim, class Variant>
cudaError_t launch_fwd(const AttnFwdArgs& a, const typename Variant::Args& extra);
}  // namespace attn

namespace {

using flex::CatalogVariant;

template <class Element>
cudaError_t launch_for_head_dim(int d, const AttnFwdArgs& a, const CatalogVariant::Args& f) {
  switch (d) {
    case 64: return attn::launch_fwd<Element, 64, CatalogVariant>(a, f);
    case 128: return attn::launch_fwd<Element, 128, CatalogVariant>(a, f);
    default: return attn::launch_fwd<Element, 256, CatalogVariant>(a, f);
  }
}

// Key tile width of the forward kernel at head dim d (FwdTraits::kBlockN).
int key_tile_width(int64_t d) {
  switch (d) {
    case 64: return attn::FwdTraits<cutlass::bfloat16_t, 64>::kBlockN;
    case 128: return attn::FwdTraits<cutlass::bfloat16_t, 128>::kBlockN;
    default: return attn::FwdTraits<cutlass::bfloat16_t, 256>::kBlockN;
  }
}

// A BlockMask list with broadcast B / H dims given stride 0.
flex::BlockList block_list(const TensorView& num, const TensorView& index) {
  flex::BlockList l;
  l.num = static_cast<const int32_t*>(num.data);
  l.index = static_cast<const int32_t*>(index.data);
  for (int d = 0; d < 3; ++d) l.num_stride[d] = d < 2 && num.size(d) == 1 ? 0 : num.stride(d);
  for (int d = 0; d < 4; ++d) l.index_stride[d] = d < 2 && index.size(d) == 1 ? 0 : index.stride(d);
  return l;
}

Status block_mask_args(const BlockMaskView& m, int64_t d, CatalogVariant::Args& f) {
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
void bsh_of_bhsd(const TensorView& t, int64_t (&s)[3]) {
  s[0] = t.stride(0);
  s[1] = t.stride(2);
  s[2] = t.stride(1);
}

}  // namespace

Status flex_forward(const FlexFwdParams& p) {
  ATTNKIT_RETURN_IF_ERROR(check_dtype_and_head_dim(p.q, p.v, {64, 128, 256}, "the CUDA flex forward"));
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"}})
    ATTNKIT_RETURN_IF_ERROR(check_tma_operand(*t, name));
  const int64_t D = p.q.size(3);
  for (auto [n, name] : {std::pair{p.q.size(2), "q (Sq)"}, std::pair{p.k.size(2), "k (Sk)"}})
    if (n > INT32_MAX / 2) return Unsupported(std::string(name) + ": the CUDA flex forward takes sequences below 2^30");
  AttnFwdArgs a;
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
  a.scale = static_cast<float>(p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(D)));
  a.stream = p.stream;
  a.tile_counter = static_cast<int*>(p.workspace.data);  // validated: >= 16 bytes
  if (reinterpret_cast<uintptr_t>(a.tile_counter) % alignof(int) != 0)
    return InvalidArgument("workspace: expected a 4-byte aligned device pointer");
  a.num_sms = current_device_sm_count();

  CatalogVariant::Args f;
  f.score_mod = catalog_score_mod(p.mods, p.k.size(2));
  f.mask_mod = catalog_mask_mod(p.mods);
  f.use_score_mod = p.mods.has_score_mod();
  f.use_mask_mod = p.mods.has_mask_mod();
  ATTNKIT_RETURN_IF_ERROR(block_mask_args(p.block_mask, D, f));
  const cudaError_t err = p.q.dtype == DType::kBFloat16 ? launch_for_head_dim<cutlass::bfloat16_t>(static_cast<int>(D), a, f)
                                                        : launch_for_head_dim<cutlass::half_t>(static_cast<int>(D), a, f);
  if (err != cudaSuccess) return {StatusCode::kBackendError, std::string("flex_attention_forward: ") + cudaGetErrorString(err)};
  return Status::Ok();
}

}  // namespace attnkit::cuda
