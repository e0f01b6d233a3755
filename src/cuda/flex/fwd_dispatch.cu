// src/cuda/flex/fwd_dispatch.cu — FlexFwdParams with the built-in catalog (FlexMods) -> the
// catalog's forward instantiation for its (dtype, head dim). The arguments shared with your own
// functors' instantiations (attnkit/cuda/flex_cuda.cuh) come from fwd_setup.cuh.
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include "attnkit/semantics/flex_catalog.hpp"
#include "src/cuda/flex/api.hpp"
#include "src/cuda/flex/fwd_setup.cuh"

namespace attnkit::cuda {
namespace attn {
template <class Element, int kHeadDim, class Variant>
cudaError_t launch_fwd(const AttnFwdArgs& a, const typename Variant::Args& extra);
}  // namespace attn

namespace {

using flex::CatalogPackedVariant;
using flex::CatalogVariant;

template <class Element, class Variant>
cudaError_t launch(const FlexFwdParams& p, const AttnFwdArgs& a, const CatalogVariant::Args& f) {
  switch (p.q.size(3)) {
    case 64: return attn::launch_fwd<Element, 64, Variant>(a, f);
    case 128: return attn::launch_fwd<Element, 128, Variant>(a, f);
    default: return attn::launch_fwd<Element, 256, Variant>(a, f);
  }
}

template <class Element>
Status forward(const FlexFwdParams& p, const AttnFwdArgs& a, const CatalogVariant::Args& f) {
  return flex::run_forward<Element>(p, a, f, [&] {
    return f.pack_heads > 1 ? launch<Element, CatalogPackedVariant>(p, a, f) : launch<Element, CatalogVariant>(p, a, f);
  }, "flex_attention_forward");
}

}  // namespace

Status flex_forward(const FlexFwdParams& caller) {
  FlexFwdParams p = caller;
  normalize_unit_strides(p.q, p.k, p.v, p.out, p.lse);
  AttnFwdArgs a;
  ATTNKIT_RETURN_IF_ERROR(flex::fill_fwd_args(p, a));
  CatalogVariant::Args f;
  f.score_mod = catalog_score_mod(p.mods, p.k.size(2));
  f.mask_mod = catalog_mask_mod(p.mods);
  f.use_score_mod = p.mods.has_score_mod();
  f.use_mask_mod = p.mods.has_mask_mod();
  ATTNKIT_RETURN_IF_ERROR(flex::set_block_mask(p.block_mask, p.q.size(3), f));
  ATTNKIT_RETURN_IF_ERROR(flex::set_short_query_path(p, a, f, /*pack_gqa=*/true));
  return p.q.dtype == DType::kBFloat16 ? forward<cutlass::bfloat16_t>(p, a, f) : forward<cutlass::half_t>(p, a, f);
}

}  // namespace attnkit::cuda
