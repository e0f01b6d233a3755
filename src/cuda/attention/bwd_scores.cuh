// src/cuda/attention/bwd_scores.cuh — the element-wise middle of the backward on one consumer
// thread's S^T / dP^T fragments (64 keys x 64 or 32 queries per warpgroup, 32 or 16 values per
// thread):
// probabilities from the stored LSE, then dS, written to shared memory with stmatrix.
//
// Softcap and masking are template switches chosen once per tile, so the loops are branch-free.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

#include "attnkit/semantics/mask.hpp"
#include "attnkit/semantics/numerics.hpp"  // softcap_tanh
#include "src/cuda/attention/bwd_ranges.hpp"
#include "src/cuda/attention/fast_math.cuh"

namespace attnkit::cuda::attn {

using namespace cute;

struct ProbArgs {
  float scale_log2;  // scale * log2(e); log2(e) alone after a softcap
  float softcap, softcap_in;  // cap, scale / cap
  int key0, row0;             // the warpgroup tile's first key and query row
  MaskRuleT<int> rule;
};

// S^T (in place) <- P^T * tanh' (what dS needs); tdVrP <- P^T in 16 bits (the A operand of dV).
// P = exp2(s * scale_log2 - lse2[query]) with s the (capped) score; masked keys give 0.
// kMask: scores outside the mask rule give 0, each tested against its thread's bounds (score_bounds:
// one compare of a constant once unrolled); kLeftEdge: the rule has a left window edge, tested only then.
template <bool kSoftcap, bool kMask, bool kLeftEdge = false, class TensorS, class TensorP, class TensorC>
CUTE_DEVICE void scores_to_probs(TensorS& tSrS, TensorP& tdVrP, TensorC const& cS, const float* lse2, const ProbArgs& pa) {
  const int k0 = get<0>(cS(0)), c0 = get<1>(cS(0));  // the thread's first score, (key, query) in the tile
  ScoreBounds bounds{};
  if constexpr (kMask) bounds = score_bounds(pa.rule, int64_t(pa.key0) + k0, int64_t(pa.row0) + c0);
  CUTE_UNROLL
  for (int i = 0; i < size(tSrS); ++i) {
    const int col = get<1>(cS(i));
    float x = tSrS(i), dtanh = 1.f;
    if constexpr (kSoftcap) {
      const float t = softcap_tanh(x * pa.softcap_in);
      x = pa.softcap * t;
      dtanh = 1.f - t * t;
    }
    float e = x * pa.scale_log2 - lse2[col];
    if constexpr (kMask) {
      const int dk = get<0>(cS(i)) - k0, d = col - c0 - dk;  // constants once unrolled
      const bool visible = dk < bounds.kmax && d >= bounds.dlo && (!kLeftEdge || d <= bounds.dhi);
      e = visible ? e : -INFINITY;
    }
    const float p = exp2_approx(e);
    tdVrP(i) = typename TensorP::value_type(p);
    tSrS(i) = p * dtanh;
  }
}

// Stores one consumer thread's 16-bit S^T-shaped fragment (64 keys x C queries of its warpgroup,
// packed in pairs) into sT (keys x queries, queries contiguous) at (key_row0, query_col0), with
// stmatrix.x4. Accumulator register i of a 64 x C fragment is (column pair, row half, column group)
// = (i % 2, i / 2 % 2, i / 4); stmatrix matrix k of instruction u is row half k % 2 of column
// group 2u + k / 2, i.e. the registers 8u + 2k, + 1 = packed[4u + k].
template <int kPacked, class TensorSmem>
CUTE_DEVICE void stmatrix_store(const uint32_t (&packed)[kPacked], TensorSmem& sT, int key_row0, int query_col0) {
  static_assert(kPacked % 4 == 0);
  const int lane = threadIdx.x % 32, warp_in_wg = threadIdx.x / 32 % 4;
  const int k = lane / 8;  // the matrix whose row address this lane supplies
  const int row = key_row0 + warp_in_wg * 16 + (k % 2) * 8 + lane % 8;
  CUTE_UNROLL
  for (int u = 0; u < kPacked / 4; ++u) {
    const uint32_t addr = cast_smem_ptr_to_uint(&sT(row, query_col0 + 8 * (2 * u + k / 2)));
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(packed[4 * u]),
                 "r"(packed[4 * u + 1]), "r"(packed[4 * u + 2]), "r"(packed[4 * u + 3]));
  }
}

// dS^T = (P^T tanh') * (dP^T - delta[query]) in 16 bits, stored to sdSt.
template <class Element, class TensorS, class TensorDP, class TensorC, class TensorSmem>
CUTE_DEVICE void store_ds(TensorS const& tSrS, TensorDP const& tdPrdP, TensorC const& cS, const float* delta, TensorSmem& sdSt,
                          int key_row0, int query_col0) {
  constexpr int kPacked = decltype(size(tSrS))::value / 2;
  cutlass::NumericArrayConverter<Element, float, 2> convert;
  uint32_t packed[kPacked];
  CUTE_UNROLL
  for (int k = 0; k < kPacked; ++k) {
    cutlass::Array<float, 2> ds;
    ds[0] = tSrS(2 * k) * (tdPrdP(2 * k) - delta[get<1>(cS(2 * k))]);
    ds[1] = tSrS(2 * k + 1) * (tdPrdP(2 * k + 1) - delta[get<1>(cS(2 * k + 1))]);
    const cutlass::Array<Element, 2> h = convert(ds);
    packed[k] = reinterpret_cast<const uint32_t&>(h);
  }
  stmatrix_store(packed, sdSt, key_row0, query_col0);
}

// P^T (already in 16 bits, the registers scores_to_probs filled) stored to spt, as dS^T.
template <class TensorP, class TensorSmem>
CUTE_DEVICE void store_pt(TensorP const& tdVrP, TensorSmem& spt, int key_row0, int query_col0) {
  using Element = typename TensorP::value_type;
  constexpr int kPacked = decltype(size(tdVrP))::value / 2;
  uint32_t packed[kPacked];
  CUTE_UNROLL
  for (int k = 0; k < kPacked; ++k) {
    cutlass::Array<Element, 2> h;
    h[0] = tdVrP(2 * k);
    h[1] = tdVrP(2 * k + 1);
    packed[k] = reinterpret_cast<const uint32_t&>(h);
  }
  stmatrix_store(packed, spt, key_row0, query_col0);
}

}  // namespace attnkit::cuda::attn
