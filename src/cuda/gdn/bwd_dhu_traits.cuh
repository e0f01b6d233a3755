// src/cuda/gdn/bwd_dhu_traits.cuh — compile-time shape of the reverse state-gradient kernel
// ("bwd_dhu") for one (element type, key head dim DK, value block BV).
//
// One CTA per (sequence, value head, BV value columns); its chunks from the last to the first.
// Warpgroup 0 (bwd_dhu_load.cuh, two halves of 64 threads) stages chunk j's rows of Q, K, w, do,
// dv (TMA) and the gates' row factors fq_r = scale e^G_r and fk_r = e^(G_last - G_r) (0 past the
// sequence end), scales do by fq in place, and writes dv2 and dh out (dh by TMA store);
// warpgroup 1 (bwd_dhu_state.cuh) carries dH [DK, BV] in fp32 registers:
//   dh[j] = dH (a 16-bit copy in shared memory, which the GEMMs read and the loader writes out)
//   dv2 = dv + diag(fk) K dH                  [C, BV]    SS (dH read MN-major), fk on the fragment
//   dH  = e^G_last dH + Q^T (fq do) - w^T dv2  [DK, BV]   SS, both operands MN-major; the WGMMA
//                                                         negates w (its scale-A of -1)
// G is the scalar gate (none: 0); with the per-key gate gk, Q and K come already gated and only
// dH's decay e^gk_last[d] is per key.
// kLocal (the chunked backward's path, BV = 64, TMA rows, no split): dv is not an input but worked
// out per chunk by a third warpgroup (bwd_dhu_local.cuh) from the Q, K, do rows the stage holds
// anyway: dv = scale (tril(Q K^T) Gamma)^T do, the dv_local kernel's product, which then needs
// no launch of its own nor its traffic (q, k, do read once more, dv written and read back).
#pragma once
#include <cuda_fp16.h>
#include <cutlass/arch/barrier.h>

#include "src/cuda/gdn/bwd_dhu_args.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"
#include "src/cuda/gdn/row_tma.cuh"

namespace attnkit::cuda::gdn {

template <class Element_, int kDK_, int kBV_, bool kLocal_ = false>
struct BwdDhuTraits {
  using Element = Element_;
  static constexpr int kDK = kDK_;   // key head dim: rows of dH
  static constexpr int kBV = kBV_;   // value columns per CTA
  static constexpr int kC = 64;      // chunk length
  static constexpr int kStages = 3;  // chunk j in use, j - 1 and j - 2 loading
  static constexpr bool kLocal = kLocal_;
  static constexpr int kThreads = kLocal ? 384 : 256;
  // kLocal's registers a thread (setmaxnreg), from the launch's 168 a thread (384 threads).
  static constexpr int kLoadRegs = 152, kStateRegs = 184, kLocalRegs = 168;
  static_assert(!kLocal || kLoadRegs + kStateRegs + kLocalRegs <= 3 * 168, "the launch's register pool");
  // "full": the gate half and the state warpgroup, and with kLocal the local warpgroup.
  static constexpr int kFullThreads = 64 + 128 + (kLocal ? 128 : 0);

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
  using MmaDh = decltype(make_tiled_mma(  // dH += Q^T (fq do)
      GMMA::ss_op_selector<Element, Element, float, Shape<DK_, BV_, C_>, GMMA::Major::MN, GMMA::Major::MN>()));
  using MmaDhNeg = decltype(make_tiled_mma(  // dH += (-w)^T dv2: the WGMMA negates A itself
      GMMA::ss_op_selector<Element, Element, float, Shape<DK_, BV_, C_>, GMMA::Major::MN, GMMA::Major::MN,
                           GMMA::ScaleIn::Neg, GMMA::ScaleIn::One>()));

  using MmaS = decltype(make_tiled_mma(  // kLocal: S = K Q^T [C keys, C queries]
      GMMA::ss_op_selector<Element, Element, float, Shape<C_, C_, DK_>, GMMA::Major::K, GMMA::Major::K>()));
  using MmaLocal = decltype(make_tiled_mma(  // kLocal: dv = P do [C, BV], P (masked, gated S) from registers
      GMMA::rs_op_selector<Element, Element, float, Shape<C_, BV_, C_>, GMMA::Major::K, GMMA::Major::MN>()));

  using TmaRowsDK = RowsTma<Element, LayoutRowsDK>;  // row_tma.cuh
  using TmaRowsBV = RowsTma<Element, LayoutRowsBV>;
  using TmaDh = decltype(make_tma_copy(SM90_TMA_STORE{}, DhGmem<Element>{}, LayoutDh{}, Shape<DK_, BV_>{}, _1{}));
  static constexpr uint32_t kTmaBytes = (3 * kC * kDK + (kLocal ? 1 : 2) * kC * kBV) * sizeof(Element);  // q, k, w, do (, dv)

  struct Stage {
    cute::array_aligned<Element, kC * kDK, 1024> q, k, w;
    // dv: then dv2, until the loader writes it out. kLocal: the chunk's gate (fp32 G_r, its first
    // 256 bytes) while the local warpgroup works, then its dv.
    cute::array_aligned<Element, kC * kBV, 1024> dout, dv;
  };
  struct SharedStorage {
    Stage stage[kStages];
    cute::array_aligned<Element, kDK * kBV, 1024> dh[2];  // dh[j] (read by chunk j's GEMM) and dh[j - 1]
    cutlass::arch::ClusterTransactionBarrier rows_landed[kStages];  // the stage's TMA bytes
    // The gates land in `decay`, G_r of row r (scalar gate) or G_last of key d (gk), and in
    // `gate_last` (scalar gate); the loader turns each slot into e^G_last in place (the thread that
    // copied a slot converts it). Row factors in fp16 (in (0, 1] times scale: 2^-11 relative, below
    // the 16-bit rows they scale) keep DK = 128, BV = 64 within 227 KB.
    __half fq[kStages][kC], fk[kStages][kC];  // row factors (0 past the sequence end)
    float decay[kStages][kDK];                // e^G_last per key
    float gate_last[kStages];
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
  static_assert(kDK % 64 == 0 && kBV % 16 == 0, "WGMMA tiles");
};

// The kernel's named barriers (0 is __syncthreads) and their thread counts: the loader's two
// halves (bwd_dhu_load.cuh) and the state warpgroup meet at per-stage "full" (gate half, with
// kLocal the local warpgroup too -> state; BwdDhuTraits::kFullThreads), "empty" (state -> both
// halves), and "dh free" (output half -> state). kLocal's per-stage "do read" (local warpgroup ->
// gate half: do may be scaled in place) takes the unaligned path's "rows copied" ids (kLocal is
// TMA rows only).
struct DhuBarriers {
  static constexpr int kGateHalf = 1, kState = 2, kOutputHalf = 10, kLocal = 14;  // a group's own
  static constexpr int kFull = 3, kEmpty = 6;  // + stage
  static constexpr int kDhFree = 9;
  static constexpr int kRowsCopied = 11;       // + stage: the unaligned path's rows (output -> gate half)
  static constexpr int kDoRead = 11;           // + stage: kLocal (local warpgroup -> gate half)
  static constexpr int kEmptyThreads = 128 + 128, kDhFreeThreads = 64 + 128, kDoReadThreads = 64 + 128;
};

}  // namespace attnkit::cuda::gdn
