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

// A 4 x 4 transpose of 32-bit values across the four lanes of a quad, in two exchange stages:
// lane q holds m[c] = M[q][c] on entry and m[r] = M[r][q] on return. All 32 lanes must call it.
CUTE_DEVICE void quad_transpose(uint32_t (&m)[4]) {
  const bool b0 = threadIdx.x & 1, b1 = threadIdx.x & 2;  // the lane's bits within its quad
  // With lane q ^ 1: keep the columns c with c % 2 == q % 2, trade the others. Then u0, u1 are
  // rows (q & 2) + 0, + 1 of column q % 2, and u2, u3 the same rows of column 2 + q % 2.
  const uint32_t r0 = __shfl_xor_sync(0xffffffff, b0 ? m[0] : m[1], 1);
  const uint32_t r1 = __shfl_xor_sync(0xffffffff, b0 ? m[2] : m[3], 1);
  const uint32_t own0 = b0 ? m[1] : m[0], own1 = b0 ? m[3] : m[2];
  const uint32_t u0 = b0 ? r0 : own0, u1 = b0 ? own0 : r0, u2 = b0 ? r1 : own1, u3 = b0 ? own1 : r1;
  // With lane q ^ 2: keep column q (2 (q / 2) + q % 2), trade the other.
  const uint32_t s0 = __shfl_xor_sync(0xffffffff, b1 ? u0 : u2, 2);
  const uint32_t s1 = __shfl_xor_sync(0xffffffff, b1 ? u1 : u3, 2);
  const uint32_t k0 = b1 ? u2 : u0, k1 = b1 ? u3 : u1;  // rows 2 (q / 2) + 0, + 1
  m[0] = b1 ? s0 : k0;
  m[1] = b1 ? s1 : k1;
  m[2] = b1 ? k0 : s0;
  m[3] = b1 ? k1 : s1;
}

// 16-byte row stores of a (row, col) fragment (as_rowcol). In a row, lane q of a quad holds the
// pair (8j + 2q, +1) of every 8-column group j (registers ni = 2j, 2j + 1). For each run of four
// groups the quad transposes (quad_transpose_row), so that lane q holds group 4g + q whole and
// writes it with one 16-byte store (store_row_16b): a warp's stores fill their 32-byte sectors
// (4-byte pair stores left every sector half used: ncu, docs/perf/flex_fwd.md).
// Callers transpose every row before the first store: a store's source registers stay busy until
// the store has read them, and with transpose / store / transpose / ... the later runs queued
// behind the earlier stores (~200 cycles a store at D128; docs/perf/attention_fwd.md, v12).
template <class TensorA>
constexpr int kRunsOf = decltype(size<1>(std::declval<TensorA>()))::value / 8;  // runs of four 8-column groups

// Row mi of the fragment, converted to Element and transposed: m[g] = lane q's group 4g + q.
// All 32 lanes must call it (shuffles).
template <class Element, class TensorA, int kRuns>
CUTE_DEVICE void quad_transpose_row(TensorA const& acc_rc, int mi, uint32_t (&m)[kRuns][4]) {
  static_assert(kRuns * 8 == decltype(size<1>(acc_rc))::value);
  CUTE_UNROLL
  for (int g = 0; g < kRuns; ++g) {
    CUTE_UNROLL
    for (int c = 0; c < 4; ++c) {
      cutlass::Array<Element, 2> pair;
      pair[0] = Element(acc_rc(mi, 8 * g + 2 * c));
      pair[1] = Element(acc_rc(mi, 8 * g + 2 * c + 1));
      m[g][c] = reinterpret_cast<const uint32_t&>(pair);
    }
    quad_transpose(m[g]);
  }
}

// Writes quad_transpose_row's words of row mi at `row` (16-byte aligned).
template <class Element, class TensorC, int kRuns>
CUTE_DEVICE void store_row_16b(const uint32_t (&m)[kRuns][4], TensorC const& coord_rc, int mi, Element* row) {
  const int q = threadIdx.x % 4;
  CUTE_UNROLL
  for (int g = 0; g < kRuns; ++g) {
    const int group0 = get<1>(coord_rc(mi, 8 * g)) - 2 * q;  // first column of group 4g
    *reinterpret_cast<uint4*>(row + group0 + 8 * q) = make_uint4(m[g][0], m[g][1], m[g][2], m[g][3]);
  }
}

}  // namespace attnkit::cuda::attn
