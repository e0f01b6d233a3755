// src/cuda/gdn/chunk_fwd_state.cuh — warpgroup 1 of the recurrence kernel: carries the state
// H [DK, BV] in fp32 registers (the accumulator of H += K^T Dv) through the sequence's chunks and,
// at the end, writes the final state. Only the state's own path runs here; the chunk's output is
// warpgroup 2's (chunk_fwd_output.cuh), from the H_j and v_new_j this one leaves in shared memory.
//
// Per chunk j (stage published by the loader, w and u computed by the WY kernel):
//   V' = w H_j (SS, H_j's 16-bit copy read MN-major);  v_new = u - V'  -> output warpgroup
//   H_{j+1} = exp(gamma_last) H_j + K^T (exp(gamma_last - gamma) v_new)   (SS)
//   H_{j+1}'s 16-bit copy for chunk j + 1.
#pragma once
#include <cutlass/arch/barrier.h>

#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn {

template <class T>
struct StateWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  const ChunkFwdArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  static CUTE_DEVICE void sync() { ChunkBarriers::sync(ChunkBarriers::kState, 128); }

  template <class TH, class SH>
  CUTE_DEVICE void publish_state(const TH& tH, SH&& tHsH) const {  // H's 16-bit copy for the GEMMs
    store_pairs<Element>(tH, tHsH, [](int, float x) { return x; });
    cutlass::arch::fence_view_async_shared();
    sync();
  }

  CUTE_DEVICE void run() {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    typename T::MmaWH mma_wh;
    typename T::MmaH mma_h;
    auto thr_wh = mma_wh.get_thread_slice(tid);
    auto thr_h = mma_h.get_thread_slice(tid);
    Tensor sDv = make_tensor(make_smem_ptr(sm.dv.data()), typename T::LayoutRowsBV{});    // [C, BV]
    Tensor sDvt = make_tensor(make_smem_ptr(sm.dv.data()), typename T::LayoutRowsBVt{});  // [BV, C]
    auto sH = [&](int b) { return make_tensor(make_smem_ptr(sm.h[b].data()), typename T::LayoutH{}); };      // [DK, BV]
    auto sHt = [&](int b) { return make_tensor(make_smem_ptr(sm.h[b].data()), typename T::LayoutHt{}); };    // [BV, DK]
    auto sVn = [&](int b) { return make_tensor(make_smem_ptr(sm.vnew[b].data()), typename T::LayoutRowsBV{}); };

    // The state, fp32 [DK, BV] over the warpgroup, from h0 (or 0).
    Tensor tH = partition_fragment_C(mma_h, Shape<Int<kDK>, Int<kBV>>{});
    Tensor cH = thr_h.partition_C(make_identity_tensor(Shape<Int<kDK>, Int<kBV>>{}));
    const int v0 = it.vb * kBV;
    CUTE_UNROLL
    for (int i = 0; i < size(tH); ++i) {
      const int k = get<0>(cH(i)), v = v0 + get<1>(cH(i));
      tH(i) = a.h0.data.ptr ? a.h0.data[it.n * a.h0.sn + it.hv * a.h0.sh + k * a.h0.sk + v * a.h0.sv] : 0.f;
    }
    publish_state(tH, thr_h.partition_C(sH(0)));

    Tensor tWH = partition_fragment_C(mma_wh, Shape<Int<kC>, Int<kBV>>{});  // fp32 [C, BV]: w H, then v_new
    Tensor cV = thr_wh.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kBV>>{}));
    const int r0 = get<0>(cV(0));  // this thread's rows: r0 and r0 + 8
    auto half = [&](int i) { return (get<0>(cV(i)) - r0) / 8; };
    const int n = it.nchunks;
    for (int j = 0; j < n; ++j) {
      const int s = j % T::kStages, b = j % 2;
      auto& st = sm.stage[s];
      const float* gamma = sm.gamma[s];
      Tensor sW = make_tensor(make_smem_ptr(st.w.data()), typename T::LayoutRowsDK{});    // [C, DK]
      Tensor sKt = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDKt{});  // [DK, C]
      Tensor sU = make_tensor(make_smem_ptr(st.u.data()), typename T::LayoutRowsBV{});    // [C, BV]
      ChunkBarriers::sync(ChunkBarriers::kFull + s, 384);
      {
        Tensor tA_W = thr_wh.partition_fragment_A(sW);
        Tensor tB_H = thr_wh.partition_fragment_B(sHt(b));
        attn::gemm_zero<false>(mma_wh, tA_W, tB_H, tWH);
      }
      // gamma is in log2 units: exp(x) = ex2(x log2 e).
      const float g_last = gamma[kC - 1];
      const float dv_scale[2] = {ex2(g_last - gamma[r0]), ex2(g_last - gamma[r0 + 8])};
      Tensor tUs = thr_wh.partition_C(sU);
      warpgroup_wait<0>();
      CUTE_UNROLL
      for (int i = 0; i < size(tWH); i += 2) {  // v_new = u - w H, in place of w H
        const uint32_t raw = ld_shared_b32(&tUs(i));  // columns i, i + 1: adjacent in the tile
        const auto u2 = reinterpret_cast<const cutlass::Array<Element, 2>&>(raw);
        tWH(i) = float(u2[0]) - tWH(i);
        tWH(i + 1) = float(u2[1]) - tWH(i + 1);
      }
      store_pairs<Element>(tWH, thr_wh.partition_C(sVn(b)), [](int, float x) { return x; });
      store_pairs<Element>(tWH, thr_wh.partition_C(sDv), [&](int i, float x) { return x * dv_scale[half(i)]; });
      const float decay = ex2(g_last);
      CUTE_UNROLL
      for (int i = 0; i < size(tH); ++i) tH(i) *= decay;
      cutlass::arch::fence_view_async_shared();
      sync();  // v_new and D v_new complete
      ChunkBarriers::arrive(ChunkBarriers::kVnew + b, 256);
      {  // H += K^T (D v_new)
        Tensor tA_Kt = thr_h.partition_fragment_A(sKt);
        Tensor tB_Dv = thr_h.partition_fragment_B(sDvt);
        attn::gemm_ss(mma_h, tA_Kt, tB_Dv, tH);
      }
      warpgroup_wait<0>();
      ChunkBarriers::arrive(ChunkBarriers::kEmpty + s, 384);  // w, u and K are read
      if (j + 1 < n) {
        // H_{j+1} goes where H_{j-1} was: the output warpgroup must be done with chunk j - 1.
        if (j >= 1) ChunkBarriers::sync(ChunkBarriers::kHfree + (1 - b), 256);
        publish_state(tH, thr_h.partition_C(sH(1 - b)));
      }
    }
    if (a.ht) {
      CUTE_UNROLL
      for (int i = 0; i < size(tH); ++i) {
        const int k = get<0>(cH(i)), v = v0 + get<1>(cH(i));
        a.ht[it.n * a.ht_sn + it.hv * a.ht_sh + k * a.ht_sk + v * a.ht_sv] = tH(i);
      }
    }
  }
};

}  // namespace attnkit::cuda::gdn
