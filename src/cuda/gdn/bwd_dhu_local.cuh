// src/cuda/gdn/bwd_dhu_local.cuh — warpgroup 2 of the bwd_dhu kernel with BwdDhuTraits::kLocal:
// each chunk's dv (the chunked backward's dv_local, spec/gdn.md's Backward step 2) worked out from
// the rows the stage holds anyway, instead of read from a kernel of its own:
//   dv = P do   [C, BV],   P [C keys, C queries] = K Q^T, entry (key c, query r) kept for r >= c,
//                          times scale e^(G_r - G_c)   (the dv_local kernel's product and roundings)
// With the op's l2norm Q and K are the normalised rows (qn, kn: l2norm_rows.cuh's kernel writes
// them first), or the raw rows with their inverse norms (a.rstd_q: the forward's, kept), folded
// into P's exponent here; normalising the stage's rows in place here sat on the chain to the
// state warpgroup and cost more than the dv_local kernel it saves (docs/perf/gdn_chunk_bwd.md).
//
// Per chunk, on the stage the loader filled (its TMA barrier):
//   rows past the sequence end to zero (the gate half's job without kLocal), G_r into dv's buffer
//   -> S = K Q^T -> P in registers -> dv = P do -> "do read" (the gate half may scale do in place)
//   -> dv into dv's buffer -> "full" (the state warpgroup forms dv2 there as before).
#pragma once
#include <cutlass/arch/barrier.h>

#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/bwd_dhu_args.cuh"
#include "src/cuda/gdn/bwd_dhu_traits.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"  // ChunkPieces

namespace attnkit::cuda::gdn {

template <class T>
struct DhuLocalWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  using B = DhuBarriers;
  const BwdDhuArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  using PiecesDK = ChunkPieces<kDK, typename T::LayoutRowsDK>;  // Q, K, w: 128 threads
  using PiecesBV = ChunkPieces<kBV, typename T::LayoutRowsBV>;  // do

  static CUTE_DEVICE void sync() { ChunkBarriers::sync(B::kLocal, 128); }
  static CUTE_DEVICE auto& smem() { return chunk_smem<typename T::SharedStorage>(); }

  CUTE_DEVICE void run() const {  // it.nchunks >= 1
    auto& sm = smem();
    typename T::MmaS mma_s;
    typename T::MmaLocal mma_o;
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_o = mma_o.get_thread_slice(tid);
    const PiecesDK dk(tid, sm.stage[0].q.data());
    const PiecesBV bv(tid, sm.stage[0].dout.data());
    Tensor tS = partition_fragment_C(mma_s, Shape<Int<kC>, Int<kC>>{});  // fp32 [C keys, C queries]
    Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kC>>{}));
    Tensor rP = make_tensor<Element>(attn::acc_as_operand_a_layout(tS.layout()));  // P, A of dv
    Tensor tO = partition_fragment_C(mma_o, Shape<Int<kC>, Int<kBV>>{});  // fp32 [C, BV]: dv
    const int n = it.nchunks;
    const bool fold = a.rstd_q.ptr != nullptr;
    // Row tid's inverse norms {rstd_q, rstd_k} (fold) of step i's chunk, loaded two steps ahead
    // into registers, so that no DRAM round trip of theirs sits on the chain to the state warpgroup.
    DhuRowNorms norms_of(a, it, tid < kC ? tid : kC - 1);
    auto row_norms = [&] { return tid < kC ? norms_of.next() : make_float2(1.f, 1.f); };  // the next step's
    // Held as log2 (P's exponent terms), converted one step ahead after the step's kFull arrival:
    // off the stretch between the stage's landing and the products.
    auto log2s = [](float2 x) { return make_float2(__log2f(x.x), __log2f(x.y)); };
    float2 log_norms = log2s(row_norms()), next_norms = row_norms();  // steps 0, 1
    for (int i = 0; i < n; ++i) {
      const float2 after_norms = row_norms();  // step i + 2's
      const int s = i % T::kStages, j = n - 1 - i, valid = it.valid_rows(j);
      auto& st = sm.stage[s];
      auto at = [](const auto* x) { return cute::cast_smem_ptr_to_uint(x); };
      // G of row tid (past the end: the last row's; its rows are zeros), read while the rows land;
      // into dv's buffer only once they have (the buffer held dv2 of step i - 3 until then).
      // Scaled to log2 units only then: multiplied at the load, the warp waited for it right there.
      float g = 0.f;
      if (tid < kC && a.gate) g = a.gate[it.b * a.g_sb + (it.t0 + int64_t(j) * kC + min(tid, valid - 1)) * a.g_st + int64_t(it.hv) * a.g_sh];
      // With fold, P's factor e^(G_r - G_c) rstd_q[r] rstd_k[c] as one exponent: G_r + log2 rstd_q[r]
      // and G_c - log2 rstd_k[c] in two more rows of G, so that the loop below is the unfolded one
      // (a second copy of it with the two factors per element: bwd_dhu +45% at B4, instruction
      // cache misses and the state warpgroup waiting for kFull).
      float* gate = reinterpret_cast<float*>(st.dv.data());  // G [C] (fold: [3][C])
      const float* gate_q = fold ? gate + kC : gate;
      const float* gate_k = fold ? gate + 2 * kC : gate;
      sm.rows_landed[s].wait((i / T::kStages) % 2);
      if (tid < kC) {
        g *= a.gate_log2;
        gate[tid] = g;
        if (fold) {
          gate[kC + tid] = g + log_norms.x;
          gate[2 * kC + tid] = g - log_norms.y;
        }
      }
      if (valid < kC) {  // a box reads on past the end into the next sequence's rows
        dk.zero_from(at(st.q.data()), valid);
        dk.zero_from(at(st.k.data()), valid);
        dk.zero_from(at(st.w.data()), valid);
        bv.zero_from(at(st.dout.data()), valid);
      }
      sync();  // zeroed rows, G
      cutlass::arch::fence_view_async_shared();  // zeroed rows, before the WGMMAs read them
      {
        Tensor sK = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDK{});  // [C, DK]
        Tensor sQ = make_tensor(make_smem_ptr(st.q.data()), typename T::LayoutRowsDK{});  // [C, DK]
        Tensor tA = thr_s.partition_fragment_A(sK);
        Tensor tB = thr_s.partition_fragment_B(sQ);
        attn::gemm_zero<false>(mma_s, tA, tB, tS);
      }
      warpgroup_wait<0>();
      CUTE_UNROLL
      for (int e = 0; e < size(tS); ++e) {  // key c, query r: as the dv_local kernel rounds it
        const int c = get<0>(cS(e)), r = get<1>(cS(e));
        rP(e) = Element(r >= c ? a.scale * ex2(gate_q[r] - gate_k[c]) * tS(e) : 0.f);
      }
      {
        Tensor sDot = make_tensor(make_smem_ptr(st.dout.data()), typename T::LayoutRowsBVt{});  // [BV, C]
        Tensor tB = thr_o.partition_fragment_B(sDot);
        attn::gemm_zero<true>(mma_o, rP, tB, tO);
      }
      warpgroup_wait<0>();
      ChunkBarriers::arrive(B::kDoRead + s, B::kDoReadThreads);  // the gate half scales do now
      sync();  // every thread's reads of G, before dv takes its place
      Tensor sDv = make_tensor(make_smem_ptr(st.dv.data()), typename T::LayoutRowsBV{});  // [C, BV]
      store_pairs<Element>(tO, thr_o.partition_C(sDv), [](int, float x) { return x; });
      cutlass::arch::fence_view_async_shared();
      ChunkBarriers::arrive(B::kFull + s, T::kFullThreads);
      log_norms = log2s(next_norms);
      next_norms = after_norms;
    }
  }
};

}  // namespace attnkit::cuda::gdn
