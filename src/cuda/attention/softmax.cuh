// src/cuda/attention/softmax.cuh — masking and online softmax on the S fragment of one thread.
//
// A consumer thread holds 2 rows of S (rows r and r + 8 of its warp's 16) and BN/4 columns of
// each. Row statistics are reduced over the 4 threads of a quad that share the rows. Scores are
// kept in their natural scale; exp2 is taken of (s - max) * scale * log2(e), so every exponent
// is <= 0 (scale > 0: a caller's scale <= 0 reaches the kernel through Q, fold_scale_sign_into_q). A row with no visible key keeps max = -inf and sum = 0 (output 0, LSE -inf).
#pragma once
#include <cmath>
#include <cute/tensor.hpp>

#include "attnkit/semantics/mask.hpp"
#include "attnkit/semantics/numerics.hpp"  // softcap_tanh
#include "src/cuda/attention/fast_math.cuh"
#include "src/cuda/attention/fragment.cuh"

namespace attnkit::cuda::attn {

using namespace cute;

// Sets S(row, col) = -inf where key col of this tile is not visible to query row:
// beyond seqlen_k, or outside [rule.lo(row), rule.hi(row)]. Coordinates are tile-local; row0 and
// col0 place the tile in the sequence.
// The bounds are taken relative to this thread's first column, so each element compares a
// compile-time column offset with a per-row bound (one ISETP with an immediate, no per-element
// address arithmetic); without a left window edge (causal, or no window) the lower bound is 0
// and only the upper one is tested. Integer compares and selects issue at half rate: the generic
// two-sided test on a masked key tile cost ~900 cycles of a D64 warpgroup's turn.
template <bool kLowerBound, class TensorS, class TensorC>
CUTE_DEVICE void apply_mask_bounds(TensorS& s_rc, TensorC const& coord_rc, const MaskRuleT<int>& rule, int row0, int col0) {
  const int c0 = get<1>(coord_rc(0, 0));
  CUTE_UNROLL
  for (int mi = 0; mi < size<0>(s_rc); ++mi) {
    const int row = row0 + get<0>(coord_rc(mi, 0));
    const int lo = rule.lo(row) - col0 - c0;
    const int hi = rule.hi(row) - col0 - c0;  // rule.hi is already clamped to sk - 1
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(s_rc); ++ni) {
      const int c = get<1>(coord_rc(mi, ni)) - c0;  // a constant once unrolled
      if (c > hi || (kLowerBound && c < lo)) s_rc(mi, ni) = -INFINITY;
    }
  }
}

template <class TensorS, class TensorC>
CUTE_DEVICE void apply_mask(TensorS& s_rc, TensorC const& coord_rc, const MaskRuleT<int>& rule, int row0, int col0) {
  if (rule.left < 0) apply_mask_bounds<false>(s_rc, coord_rc, rule, row0, col0);
  else apply_mask_bounds<true>(s_rc, coord_rc, rule, row0, col0);
}

// The softcap without its final multiply: s <- tanh(s * scale / cap), the score in units of the cap
// (the caller's exponent scale and LSE scale carry it: DenseScores). An FMUL and a MUFU.TANH a score.
template <class TensorS>
CUTE_DEVICE void apply_softcap(TensorS& s_rc, float scale_over_cap) {
  CUTE_UNROLL
  for (int i = 0; i < size(s_rc); ++i) s_rc(i) = softcap_tanh(s_rc(i) * scale_over_cap);
}

CUTE_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
CUTE_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

template <int kRows>
struct OnlineSoftmax {
  float row_max[kRows];
  float row_sum[kRows];  // partial: this thread's columns only, reduced in finalize()
  float scale_log2;      // the scores' unit * log2(e): scale, or the cap after a softcap

  CUTE_DEVICE explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    CUTE_UNROLL
    for (int i = 0; i < kRows; ++i) {
      row_max[i] = -INFINITY;
      row_sum[i] = 0.f;
    }
  }

  // Folds one tile of scores into the running statistics: S <- exp2((S - max) * scale_log2)
  // in place; returns through corr the factor that rescales the output accumulated so far.
  template <class TensorS>
  CUTE_DEVICE void step(TensorS& s_rc, float (&corr)[kRows]) {
    static_assert(decltype(size<0>(s_rc))::value == kRows);
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      float m = row_max[mi];
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s_rc); ++ni) m = fmaxf(m, s_rc(mi, ni));
      m = quad_max(m);
      // The row max seen so far stays -inf only while every key was masked; exponentiate
      // against 0 then so that masked scores give exp2(-inf) = 0, never NaN.
      const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
      corr[mi] = exp2_approx(row_max[mi] * scale_log2 - m_scaled);  // old max <= new max; 0 on the first tile
      row_max[mi] = m;
      float sum = 0.f;
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s_rc); ++ni) {
        const float p = exp2_approx(s_rc(mi, ni) * scale_log2 - m_scaled);
        s_rc(mi, ni) = p;
        sum += p;
      }
      row_sum[mi] = row_sum[mi] * corr[mi] + sum;
    }
  }

  // Returns 1 / rowsum (0 for empty rows) and writes the natural-log LSE (-inf when empty).
  CUTE_DEVICE void finalize(float (&inv_sum)[kRows], float (&lse)[kRows], float scale) {
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const float sum = quad_sum(row_sum[mi]);
      const bool empty = sum == 0.f || row_max[mi] == -INFINITY;
      inv_sum[mi] = empty ? 0.f : 1.f / sum;
      lse[mi] = empty ? -INFINITY : row_max[mi] * scale + logf(sum);
    }
  }
};

template <class TensorO, int kRows>
CUTE_DEVICE void rescale_rows(TensorO& o_rc, const float (&factor)[kRows]) {
  CUTE_UNROLL
  for (int mi = 0; mi < kRows; ++mi)
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(o_rc); ++ni) o_rc(mi, ni) *= factor[mi];
}

}  // namespace attnkit::cuda::attn
