// src/cuda/attention/fast_math.cuh — the exponential and the softcap's tanh of the softmax kernels.
#pragma once
#include <cute/config.hpp>

namespace attnkit::cuda::attn {

// 2^x as one MUFU.EX2 (ex2.approx.ftz): exp2(-inf) = 0, results below 2^-126 flush to 0. exp2f
// without fast-math compiles to ex2.approx.f32, which keeps denormals by scaling around the MUFU op:
// a compare and two predicated multiplies per element, a third of the forward softmax's instructions.
CUTE_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) as one MUFU.TANH (tanh.approx.f32, relative error below 2^-10.9, as FlashAttention's
// softcap): tanhf is EX2, RCP and a dozen FMAs, three MUFU ops a score with the softmax's EX2
// (docs/perf/attention_fwd.md, v18). The flex kernels' copy is flex_mods.hpp's softcap_tanh
// (attnkit/semantics/: a public header, shared with the CPU backend).
CUTE_DEVICE float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace attnkit::cuda::attn
