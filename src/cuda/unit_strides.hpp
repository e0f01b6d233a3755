// src/cuda/unit_strides.hpp — the strides the CUDA kernels see on size-1 dims.
#pragma once
#include "attnkit/tensor.hpp"

namespace attnkit::cuda {

// A size-1 dim is never stepped, so its stride is the caller's free choice (torch leaves any value
// there, e.g. after unsqueeze or as_strided), but a TMA descriptor takes every dim's stride and
// needs multiples of 16 bytes: an odd one failed the attention launch (error 715; AttentionGpu.
// OddUnitStridesAndBroadcastKv) and sent GDN's row loads to the cp.async path. The kernels see the
// stride a contiguous tensor would have there instead.
inline void normalize_unit_strides(TensorView& t) {
  for (int d = t.ndim - 2; d >= 0; --d)
    if (t.sizes[d] == 1) t.strides[d] = t.sizes[d + 1] * t.strides[d + 1];
}
template <class... Views>
void normalize_unit_strides(TensorView& t, Views&... rest) {
  normalize_unit_strides(t);
  (normalize_unit_strides(rest), ...);
}

}  // namespace attnkit::cuda
