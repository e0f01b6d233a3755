// src/cuda/gdn/bwd_dhu_traits.cuh — compile-time shape of the reverse state-gradient kernel
// ("bwd_dhu") for one (element type, key head dim DK, value block BV).
//
// One CTA per (sequence, value head, BV value columns); its chunks from the last to the first.
// Warpgroup 0 (bwd_dhu_load.cuh) stages chunk j's rows and folds the gates into them:
//   Qs = scale * Q * e^G,   Kd = K * e^(G_last - G),   -w          [C, DK] each
// warpgroup 1 (bwd_dhu_state.cuh) carries dH [DK, BV] in fp32 registers:
//   dh[j] = dH (a 16-bit copy in shared memory, which the GEMMs read and the loader writes out)
//   dv2 = dv + Kd dH                      [C, BV]    SS (dH read MN-major)
//   dH  = e^G_last dH + Qs^T do + (-w)^T dv2   [DK, BV]   SS, both operands MN-major
// G is the scalar gate (none: 0); with the per-key gate gk, Q and K come already gated and only
// dH's decay e^gk_last[d] is per key. The decays e^G_last[d] come with the stage.
#pragma once
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn {

template <class Element_, int kDK_, int kBV_>
struct BwdDhuTraits {
  using Element = Element_;
  static constexpr int kDK = kDK_;   // key head dim: rows of dH
  static constexpr int kBV = kBV_;   // value columns per CTA
  static constexpr int kC = 64;      // chunk length
  static constexpr int kStages = 3;  // chunk j in use, j - 1 and j - 2 loading
  static constexpr int kThreads = 256;

  using LayoutRowsDK = RowMajor<Element, kC, kDK>;    // Qs, Kd, -w      [C, DK]
  using LayoutRowsDKt = RowMajorT<Element, kC, kDK>;  // their transposes [DK, C]
  using LayoutRowsBV = RowMajor<Element, kC, kBV>;    // do, dv -> dv2   [C, BV]
  using LayoutRowsBVt = RowMajorT<Element, kC, kBV>;  // their transposes [BV, C]
  using LayoutDh = RowMajor<Element, kDK, kBV>;       // dH              [DK, BV]
  using LayoutDht = RowMajorT<Element, kDK, kBV>;     // dH^T            [BV, DK]

  using C_ = Int<kC>;
  using DK_ = Int<kDK>;
  using BV_ = Int<kBV>;
  using MmaDv = decltype(make_tiled_mma(  // dv2 = Kd dH
      GMMA::ss_op_selector<Element, Element, float, Shape<C_, BV_, DK_>, GMMA::Major::K, GMMA::Major::MN>()));
  using MmaDh = decltype(make_tiled_mma(  // dH += Qs^T do, dH += (-w)^T dv2
      GMMA::ss_op_selector<Element, Element, float, Shape<DK_, BV_, C_>, GMMA::Major::MN, GMMA::Major::MN>()));

  struct Stage {
    cute::array_aligned<Element, kC * kDK, 1024> q, k, w;
    cute::array_aligned<Element, kC * kBV, 1024> dout, dv;  // dv: then dv2, until the loader writes it out
  };
  struct SharedStorage {
    Stage stage[kStages];
    cute::array_aligned<Element, kDK * kBV, 1024> dh[2];  // dh[j] (read by chunk j's GEMM) and dh[j - 1]
    float decay[kStages][kDK];                            // e^G_last per key
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
  static_assert(kDK % 64 == 0 && kBV % 32 == 0, "WGMMA tiles");
};

}  // namespace attnkit::cuda::gdn
