// src/cuda/flex/bwd_dispatch.cu — FlexBwdParams with the built-in catalog (FlexMods) -> the
// catalog's backward instantiation for its (dtype, head dim), and the workspace it needs.
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include "attnkit/semantics/flex_catalog.hpp"
#include "src/cuda/flex/api.hpp"
#include "src/cuda/flex/bwd_setup.cuh"
#include "src/cuda/cuda_status.hpp"

namespace attnkit::cuda {
namespace attn {
template <class Element, int kHeadDim, class Variant>
cudaError_t launch_bwd(const AttnBwdArgs& a, const typename Variant::Args& extra);
template <class Element, int kHeadDim>
cudaError_t launch_attention_bwd(const AttnBwdArgs& a);
}  // namespace attn

namespace {

using flex::CatalogBwdVariant;

template <class Element>
cudaError_t launch(int64_t d, const AttnBwdArgs& a, const CatalogBwdVariant::Args& f) {
  // No mods and no BlockMask: softmax attention, which the softmax backward's own instantiations
  // run (AttnBwdArgs::mask none, softcap 0): 2.2% faster than the flex variant at S16k D128 on an
  // H100, gradients bitwise equal (docs/perf/flex_bwd.md, v20).
  if (!f.use_score_mod && !f.use_mask_mod && !f.block_mask) {
    switch (d) {
      case 64: return attn::launch_attention_bwd<Element, 64>(a);
      case 128: return attn::launch_attention_bwd<Element, 128>(a);
      default: return attn::launch_attention_bwd<Element, 256>(a);
    }
  }
  switch (d) {
    case 64: return attn::launch_bwd<Element, 64, CatalogBwdVariant>(a, f);
    case 128: return attn::launch_bwd<Element, 128, CatalogBwdVariant>(a, f);
    default: return attn::launch_bwd<Element, 256, CatalogBwdVariant>(a, f);
  }
}

}  // namespace

size_t flex_backward_workspace_size(const FlexBwdParams& p) { return flex::FlexBwdPlan(p).ws.total; }

Status flex_backward(const FlexBwdParams& caller) {
  FlexBwdParams p = caller;
  normalize_unit_strides(p.q, p.k, p.v, p.out, p.lse, p.dout, p.dq, p.dk, p.dv);
  AttnBwdArgs a;
  ATTNKIT_RETURN_IF_ERROR(flex::fill_bwd_args(p, a));
  CatalogBwdVariant::Args f;
  f.score_mod = catalog_score_mod(p.mods, p.k.size(2));
  f.mask_mod = catalog_mask_mod(p.mods);
  f.use_score_mod = p.mods.has_score_mod();
  f.use_mask_mod = p.mods.has_mask_mod();
  ATTNKIT_RETURN_IF_ERROR(flex::set_bwd_block_mask(p, f, a));
  const cudaError_t err = p.q.dtype == DType::kBFloat16 ? launch<cutlass::bfloat16_t>(p.q.size(3), a, f)
                                                        : launch<cutlass::half_t>(p.q.size(3), a, f);
  return cuda_status(err, "flex_attention_backward");
}

}  // namespace attnkit::cuda
