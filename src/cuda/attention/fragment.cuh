// src/cuda/attention/fragment.cuh — re-viewing WGMMA register fragments.
//
// An SM90 accumulator fragment of one thread has layout ((2, 2, N/8), MMA_M, MMA_N): mode 0 holds
// (2 adjacent columns, 2 rows 8 apart, N/8 column groups). The helpers give the same registers as
// (row, col) matrices, and as the A operand of a register-sourced (RS) WGMMA.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

namespace attnkit::cuda::attn {

using namespace cute;

// ((2, 2, N/8), MMA_M, MMA_N) -> ((2, MMA_M), (2, N/8, MMA_N)): rows x cols of this thread.
template <class Layout0>
CUTE_HOST_DEVICE auto rowcol_layout(Layout0 acc) {
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)), make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)));
}

template <class Tensor0>
CUTE_DEVICE auto as_rowcol(Tensor0&& t) {
  return make_tensor(t.data(), rowcol_layout(t.layout()));
}

// ((2, 2, N/8), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, N/16 * MMA_N): the accumulator of S = Q.K^T
// reused as the A operand (P) of the 16-bit RS WGMMA P.V, whose k-blocks are 16 columns wide.
template <class Layout0>
CUTE_HOST_DEVICE auto acc_as_operand_a_layout(Layout0 acc) {
  auto l = logical_divide(get<0, 2>(acc), Tile<_2>{});  // (2, N/16)
  return make_layout(make_layout(get<0, 0>(acc), get<0, 1>(acc), get<0, 0>(l)), get<1>(acc),
                     coalesce(make_layout(get<0, 1>(l), get<2>(acc))));
}

// out <- in converted element-wise (fp32 -> bf16/fp16); both register tensors of equal size.
template <class TensorIn, class TensorOut>
CUTE_DEVICE void convert_into(TensorIn const& in, TensorOut& out) {
  using From = typename TensorIn::value_type;
  using To = typename TensorOut::value_type;
  constexpr int N = decltype(size(in))::value;
  cutlass::NumericArrayConverter<To, From, N> convert;
  *reinterpret_cast<cutlass::Array<To, N>*>(out.data()) = convert(*reinterpret_cast<cutlass::Array<From, N> const*>(in.data()));
}

}  // namespace attnkit::cuda::attn
