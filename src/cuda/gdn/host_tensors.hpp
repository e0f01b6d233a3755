// src/cuda/gdn/host_tensors.hpp — TensorViews as the GDN kernels' argument structs see them
// (host side of the chunked kernels' dispatch).
#pragma once
#include <cstdint>

#include "attnkit/tensor.hpp"
#include "src/cuda/gdn/chunk_fwd_args.cuh"

namespace attnkit::cuda::gdn {

// [B, T, heads, D] rows; varlen tensors (B == 1) read batch stride 0.
inline RowTensor row_tensor(const TensorView& t, bool varlen) {
  return {t.data, varlen ? 0 : t.strides[0], t.strides[1], t.strides[2]};
}

// Every row start of t aligned to `bytes` (cp.async and the output stores move 16 bytes).
inline bool rows_aligned(const TensorView& t, bool varlen, int64_t bytes) {
  const int64_t e = dtype_size(t.dtype);
  bool ok = reinterpret_cast<uintptr_t>(t.data) % bytes == 0;
  for (int d = varlen ? 1 : 0; d < 3; ++d) ok = ok && (t.strides[d] * e) % bytes == 0;
  return ok;
}

// (k, v) strides of a K x V matrix stored K-first ([.., K, V]) or V-first ([.., V, K]) in the
// last two dims of t.
inline void state_strides(const TensorView& t, StateLayout layout, int64_t& sk, int64_t& sv) {
  const int d = t.ndim - 2;
  const bool kfirst = layout == StateLayout::kKV;
  sk = kfirst ? t.strides[d] : t.strides[d + 1];
  sv = kfirst ? t.strides[d + 1] : t.strides[d];
}

// A [N, HV, K, V] / [N, HV, V, K] state of any float dtype; absent stays absent.
inline StateTensor state_tensor(const TensorView& t, StateLayout layout) {
  StateTensor s;
  if (!t.defined()) return s;
  s.data = {t.data, t.dtype};
  s.sn = t.strides[0];
  s.sh = t.strides[1];
  state_strides(t, layout, s.sk, s.sv);
  return s;
}

}  // namespace attnkit::cuda::gdn
