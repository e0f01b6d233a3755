// attnkit/cuda/flex_cuda.cuh — the Hopper flex attention forward and backward with your own
// score_mod / mask_mod functors, instantiated in your own CUDA translation unit.
//
//   #include "attnkit/cuda/flex_cuda.cuh"
//   struct MyBias {                     // the functor contract of attnkit/semantics/flex_mods.hpp,
//     const float* table;               // callable on the device (ATTNKIT_HD); pointers address
//     template <class T>                // device memory
//     ATTNKIT_HD T operator()(T s, int64_t b, int64_t h, int64_t q, int64_t kv, T* ds) const {
//       *ds = T(1); return s + table[q - kv + 1024]; } };
//   attnkit::FlexFwdParams p = ...;     // CUDA q/k/v/out [B, H, S, D], workspace, optional BlockMask
//   attnkit::Status st = attnkit::cuda::flex_forward_with_mods<attnkit::DType::kBFloat16, 128>(
//       p, MyBias{table}, attnkit::CausalMaskMod{});
//   attnkit::FlexBwdParams g = ...;     // the forward's out and lse, dout; dq/dk/dv; workspace
//   st = attnkit::cuda::flex_backward_with_mods<attnkit::DType::kBFloat16, 128>(g, MyBias{table},
//                                                                              attnkit::CausalMaskMod{});
//
// One call instantiates one kernel for (dtype, head dim, your functors): compile only the ones
// you use (each costs about half a minute of nvcc). Build with nvcc for sm_90a; in CMake, link the
// `attnkit::cuda_kernels` target, which brings the include paths (this tree, CuTe/CUTLASS) and the
// flags. p.mods (the built-in catalog) is ignored, as in cpu::flex_forward_with_mods; IdentityScoreMod
// and NoMaskMod are recognised and cost nothing. Each key is visited as the BlockMask says (every key
// without one); mask_mod runs on partial blocks only; short queries (Sq <= 64) take the split-KV
// path as the built-in op does (p.num_splits), without its GQA packing (a second instantiation per
// functor pair; each query head keeps its own query tile). The backward differentiates through your score mod
// with the derivative it writes to *ds (evaluated per element beside the mask, so a heavy functor
// costs registers); p.deterministic as the built-in op. examples/flex_custom_mod_cuda.cu is a program.
#pragma once
#include <cutlass/numeric_types.h>

#include <string>
#include <type_traits>

#include "attnkit/flex.hpp"
#include "attnkit/semantics/flex_mods.hpp"
#include "attnkit/validate.hpp"
#include "src/cuda/attention/bwd_launch.cuh"
#include "src/cuda/attention/fwd_launch.cuh"
#include "src/cuda/flex/bwd_setup.cuh"
#include "src/cuda/flex/bwd_variant.cuh"
#include "src/cuda/flex/fwd_setup.cuh"
#include "src/cuda/flex/fwd_variant.cuh"

namespace attnkit::cuda {

namespace detail {
template <DType kDType, int kHeadDim>
Status check_instantiation(const TensorView& q, const char* op) {
  static_assert(kDType == DType::kBFloat16 || kDType == DType::kFloat16, "the CUDA kernels take bfloat16 or float16");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "the CUDA flex kernels take head dims 64, 128, 256");
  if (q.device.type != DeviceType::kCUDA)
    return InvalidArgument(std::string("q: ") + op + " runs on the GPU; got a CPU tensor (use the cpu:: one)");
  if (q.dtype != kDType)
    return InvalidArgument(std::string("q: this instantiation takes ") + dtype_name(kDType) + ", got " + dtype_name(q.dtype));
  if (q.size(3) != kHeadDim)
    return InvalidArgument("q: this instantiation takes head dim " + std::to_string(kHeadDim) + ", got " + std::to_string(q.size(3)));
  return Status::Ok();
}
// Your functors into the kernel arguments (forward or backward); the identity and the
// everything-visible mask are recognised and skipped.
template <class Args, class ScoreMod, class MaskMod>
void set_mods(Args& f, const ScoreMod& score_mod, const MaskMod& mask_mod) {
  f.score_mod = score_mod;
  f.mask_mod = mask_mod;
  f.use_score_mod = !std::is_same_v<ScoreMod, IdentityScoreMod>;
  f.use_mask_mod = !is_no_mask_v<MaskMod>;
}
}  // namespace detail

template <DType kDType, int kHeadDim, class ScoreMod, class MaskMod>
Status flex_forward_with_mods(const FlexFwdParams& caller, const ScoreMod& score_mod, const MaskMod& mask_mod) {
  FlexFwdParams p = caller;  // its size-1 dims' strides as the TMA descriptors need them (tma_checks.hpp)
  normalize_unit_strides(p.q, p.k, p.v, p.out, p.lse);
  ATTNKIT_RETURN_IF_ERROR(validate(p));
  ATTNKIT_RETURN_IF_ERROR((detail::check_instantiation<kDType, kHeadDim>(p.q, "cuda::flex_forward_with_mods")));
  AttnFwdArgs a;
  ATTNKIT_RETURN_IF_ERROR(flex::fill_fwd_args(p, a));
  using Variant = flex::FlexVariant<ScoreMod, MaskMod>;
  typename Variant::Args f;
  detail::set_mods(f, score_mod, mask_mod);
  ATTNKIT_RETURN_IF_ERROR(flex::set_block_mask(p.block_mask, kHeadDim, f));
  ATTNKIT_RETURN_IF_ERROR(flex::set_short_query_path(p, a, f, /*pack_gqa=*/false));
  using Element = std::conditional_t<kDType == DType::kBFloat16, cutlass::bfloat16_t, cutlass::half_t>;
  return flex::run_forward<Element>(p, a, f, [&] { return attn::launch_fwd<Element, kHeadDim, Variant>(a, f); },
                                    "cuda::flex_forward_with_mods");
}

template <DType kDType, int kHeadDim, class ScoreMod, class MaskMod>
Status flex_backward_with_mods(const FlexBwdParams& caller, const ScoreMod& score_mod, const MaskMod& mask_mod) {
  FlexBwdParams p = caller;
  normalize_unit_strides(p.q, p.k, p.v, p.out, p.lse, p.dout, p.dq, p.dk, p.dv);
  ATTNKIT_RETURN_IF_ERROR(validate(p));
  ATTNKIT_RETURN_IF_ERROR((detail::check_instantiation<kDType, kHeadDim>(p.q, "cuda::flex_backward_with_mods")));
  AttnBwdArgs a;
  ATTNKIT_RETURN_IF_ERROR(flex::fill_bwd_args(p, a));
  using Variant = flex::FlexBwdVariant<ScoreMod, MaskMod>;
  typename Variant::Args f;
  detail::set_mods(f, score_mod, mask_mod);
  ATTNKIT_RETURN_IF_ERROR(flex::set_bwd_block_mask(p, f, a));
  using Element = std::conditional_t<kDType == DType::kBFloat16, cutlass::bfloat16_t, cutlass::half_t>;
  const cudaError_t err = attn::launch_bwd<Element, kHeadDim, Variant>(a, f);
  return cuda_status(err, "cuda::flex_backward_with_mods");
}

}  // namespace attnkit::cuda
