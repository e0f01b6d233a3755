// src/cuda/attention/fast_math.cuh — the exponentials of the softmax kernels.
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

// tanh(x) as one MUFU.TANH (tanh.approx.f32, relative error below 2^-10.9), for the softcap: tanhf
// is EX2, RCP and a dozen FMAs. The flex kernels' copy is attnkit/semantics/flex_mods.hpp's
// softcap_tanh (a public header, shared with the CPU backend).
CUTE_DEVICE float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x for x <= 0 on the FMA and integer pipes, for a softmax whose MUFU pipe is full (a softcap's
// MUFU.TANH beside the EX2): 2^x = 2^n * 2^f with n = round(x), f in [-0.5, 0.5], 2^f by a cubic
// (relative error 1.0e-4, below half a bf16 / fp16 step: P is rounded to 16 bits for P.V anyway),
// and 2^n added into the exponent field. Nine instructions against MUFU.EX2's one, but on pipes
// with eight times its rate (docs/perf/flex_fwd.md, v19). x is clamped to -127 first: -inf
// (a masked key) gives exactly 0 (f = 0, p = 1.0f, exponent field 127 - 127), so an empty row's sum
// stays 0; x in (-127, -126) gives a value below 2^-126 (ex2.approx.ftz: 0), harmless in the sums.
CUTE_DEVICE float exp2_poly(float x) {
  x = fmaxf(x, -127.f);
  const float t = __fadd_rn(x, 0x1.8p23f);  // round-to-nearest puts n in t's low mantissa bits
  const float f = __fsub_rn(x, __fsub_rn(t, 0x1.8p23f));
  float p = __fmaf_rn(0x1.c2a196p-5f, f, 0x1.f00c2p-3f);  // minimax for relative error on [-0.5, 0.5]
  p = __fmaf_rn(p, f, 0x1.62f5fap-1f);
  p = __fmaf_rn(p, f, 1.f);                      // p(0) = 1 exactly
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));  // (t's bits << 23) = n << 23
}

}  // namespace attnkit::cuda::attn
