// src/cuda/gdn/chunk_fwd_output.cuh — warpgroup 2 of the recurrence kernel: each chunk's output
// rows from the state warpgroup's H_j and v_new_j, so that this work (half the chunk's GEMMs)
// runs beside the state's path instead of on it.
//
// Per chunk j:
//   S = Q K^T (SS, needs only the loaded rows: issued before H_j and v_new_j are ready)
//   O = scale exp(gamma) Q H_j (SS, H_j's 16-bit copy read MN-major)
//   Aqk = scale tril(S) Gamma;  O += Aqk v_new_j (RS)
//   O (16-bit) into the stage's u buffer, which the loader writes to `o`.
#pragma once
#include <cutlass/arch/barrier.h>

#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn {

template <class T>
struct OutputWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  const ChunkFwdArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  CUTE_DEVICE void run() {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    typename T::MmaWH mma_qh;  // [C, DK] x [DK, BV]
    typename T::MmaS mma_s;
    typename T::MmaU mma_av;
    auto thr_qh = mma_qh.get_thread_slice(tid);
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_av = mma_av.get_thread_slice(tid);
    Tensor tO = partition_fragment_C(mma_qh, Shape<Int<kC>, Int<kBV>>{});  // fp32 [C, BV]
    Tensor cO = thr_qh.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kBV>>{}));
    Tensor tS = partition_fragment_C(mma_s, Shape<Int<kC>, Int<kC>>{});  // fp32 [C, C]: Q K^T
    Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kC>>{}));
    Tensor rA = make_tensor<Element>(attn::acc_as_operand_a_layout(tS.layout()));  // Aqk as an A operand
    const int r0 = get<0>(cO(0));  // this thread's rows: r0 and r0 + 8
    const int n = it.nchunks;
    for (int j = 0; j < n; ++j) {
      const int s = j % T::kStages, b = j % 2;
      auto& st = sm.stage[s];
      const float* gamma = sm.gamma[s];
      Tensor sQ = make_tensor(make_smem_ptr(st.q.data()), typename T::LayoutRowsDK{});          // [C, DK]
      Tensor sK = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDK{});          // [C, DK]
      Tensor sHt = make_tensor(make_smem_ptr(sm.h[b].data()), typename T::LayoutHt{});          // [BV, DK]
      Tensor sVnt = make_tensor(make_smem_ptr(sm.vnew[b].data()), typename T::LayoutRowsBVt{}); // [BV, C]
      Tensor sO = make_tensor(make_smem_ptr(st.u.data()), typename T::LayoutRowsBV{});          // [C, BV]
      ChunkBarriers::sync(ChunkBarriers::kFull + s, 384);
      {
        Tensor tS_Q = thr_s.partition_fragment_A(sQ);
        Tensor tS_K = thr_s.partition_fragment_B(sK);
        attn::gemm_zero<false>(mma_s, tS_Q, tS_K, tS);
      }
      ChunkBarriers::sync(ChunkBarriers::kVnew + b, 256);  // H_j and v_new_j are in
      {
        Tensor tA_Q = thr_qh.partition_fragment_A(sQ);
        Tensor tB_H = thr_qh.partition_fragment_B(sHt);
        attn::gemm_zero<false>(mma_qh, tA_Q, tB_H, tO);
      }
      // gamma is in log2 units: exp(x) = ex2(x log2 e).
      const float gamma_r[2] = {gamma[r0], gamma[r0 + 8]};
      warpgroup_wait<1>();  // S
      CUTE_UNROLL
      for (int i = 0; i < size(tS); ++i) {  // Aqk = scale tril(Q K^T) * Gamma (diagonal included)
        const int r = get<0>(cS(i)), c = get<1>(cS(i));
        tS(i) = c <= r ? a.scale * tS(i) * ex2(gamma_r[(r - r0) / 8] - gamma[c]) : 0.f;
      }
      attn::convert_into(make_tensor(tS.data(), rA.layout()), rA);
      const float o_scale[2] = {a.scale * ex2(gamma_r[0]), a.scale * ex2(gamma_r[1])};
      warpgroup_wait<0>();  // Q H
      CUTE_UNROLL
      for (int i = 0; i < size(tO); ++i) tO(i) *= o_scale[(get<0>(cO(i)) - r0) / 8];
      {
        Tensor tB_Vn = thr_av.partition_fragment_B(sVnt);
        attn::gemm_rs(mma_av, rA, tB_Vn, tO);
      }
      warpgroup_wait<0>();
      if (j + 2 < n) ChunkBarriers::arrive(ChunkBarriers::kHfree + b, 256);  // done with H_j, v_new_j
      store_pairs<Element>(tO, thr_qh.partition_C(sO), [](int, float x) { return x; });  // u is consumed
      ChunkBarriers::arrive(ChunkBarriers::kEmpty + s, 384);
    }
  }
};

}  // namespace attnkit::cuda::gdn
