// src/cuda/gdn/chunk_fwd_state.cuh — warpgroup 1 of the recurrence kernel: carries the state
// H [DK, BV] in fp32 registers (the accumulator of H += K^T Dv) through the sequence's chunks,
// leaves each chunk's output rows in shared memory for the loader and, at the end, writes the
// final state.
//
// Per chunk (stage published by the loader warpgroup, w and u computed by the WY kernel), in
// issue order — the state's own path first, the output's work overlapping its GEMMs:
//   V' = w H; O = Q H              (SS, H's 16-bit copy read MN-major)
//   v_new = u - V'; H *= exp(gamma_last); H += K^T (exp(gamma_last - gamma) v_new)   (SS)
//   S = Q K^T (SS); H's 16-bit copy for the next chunk while S runs
//   O *= scale exp(gamma); Aqk = scale tril(S) Gamma; O += Aqk v_new (RS); O into u's buffer.
// The mode (Recurrence, chunk_fwd_args.cuh): kOutputAndStates (a training forward) also writes each
// chunk's start state and v_new to global memory (a.states, a.vnew) for the backward; kStates (the
// backward's rerun) writes only those, and without output only the state's own path runs.
#pragma once
#include <cutlass/arch/barrier.h>

#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn {

template <class T, Recurrence kMode>
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

  // What the backward keeps, from the 16-bit copies in shared memory, in 16-byte pieces: chunk
  // j - 1's v_new rows (live rows only) to a.vnew, chunk j's start state (H's copy) to a.states
  // [slots, HV, DK, V]. Called when both copies are complete and stay untouched until the next
  // chunk's barriers: at the end of chunk j - 1 (j = 0: before the first chunk, no v_new; j =
  // nchunks: no state), where the output path's accumulators are dead. It has no registers to
  // spare even so: everything here is worked out afresh from an opaque CTA index rather than
  // hoisted out of the chunk loop.
  template <class SVn>
  CUTE_DEVICE void keep_for_backward(const SVn& sVn, int j) const {
    int item = blockIdx.x, t = tid;
    asm volatile("" : "+r"(item), "+r"(t));
    const WorkItem w(a, item);
    if (j > 0)
      store_chunk_rows<kBV>(sVn, static_cast<Element*>(a.vnew.ptr) + w.vb * kBV, a.vnew, w, int64_t(j - 1) * kC, w.hv,
                            w.valid_rows(j - 1), true);
    if (j == w.nchunks) return;
    constexpr int kUnits = kBV / 8, kStep = 128 / kUnits;
    const int r = t / kUnits, c = (t % kUnits) * 8;
    const int64_t V = int64_t(a.v_blocks) * kBV;
    Tensor sH = make_tensor(make_smem_ptr(chunk_smem<typename T::SharedStorage>().h.data()), typename T::LayoutH{});
    auto* out = static_cast<Element*>(a.states) + ((ChunkSlot::first(a, w.n) + j) * a.HV + w.hv) * int64_t(kDK) * V +
                w.vb * kBV + c + r * V;
#pragma unroll 1  // one 16-byte piece in registers at a time
    for (int i = 0; i < kDK / kStep; ++i) st_global_v4(out + i * kStep * V, ld_shared_v4(&sH(r + i * kStep, c)));
  }

  CUTE_DEVICE void run() {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    constexpr bool output = writes_output(kMode), keep = keeps_states(kMode);
    typename T::MmaWH mma_wh;
    typename T::MmaS mma_s;
    typename T::MmaU mma_av;
    typename T::MmaH mma_h;
    auto thr_wh = mma_wh.get_thread_slice(tid);
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_av = mma_av.get_thread_slice(tid);
    auto thr_h = mma_h.get_thread_slice(tid);
    Tensor sH = make_tensor(make_smem_ptr(sm.h.data()), typename T::LayoutH{});            // [DK, BV]
    Tensor sHt = make_tensor(make_smem_ptr(sm.h.data()), typename T::LayoutHt{});          // [BV, DK]
    Tensor sVn = make_tensor(make_smem_ptr(sm.vnew.data()), typename T::LayoutRowsBV{});   // [C, BV]
    Tensor sVnt = make_tensor(make_smem_ptr(sm.vnew.data()), typename T::LayoutRowsBVt{}); // [BV, C]
    Tensor sDv = make_tensor(make_smem_ptr(sm.dv.data()), typename T::LayoutRowsBV{});
    Tensor sDvt = make_tensor(make_smem_ptr(sm.dv.data()), typename T::LayoutRowsBVt{});

    // The state, fp32 [DK, BV] over the warpgroup, from h0 (or 0).
    Tensor tH = partition_fragment_C(mma_h, Shape<Int<kDK>, Int<kBV>>{});
    Tensor cH = thr_h.partition_C(make_identity_tensor(Shape<Int<kDK>, Int<kBV>>{}));
    const int v0 = it.vb * kBV;
    CUTE_UNROLL
    for (int i = 0; i < size(tH); ++i) {
      const int k = get<0>(cH(i)), v = v0 + get<1>(cH(i));
      tH(i) = a.h0.data.ptr ? a.h0.data[it.n * a.h0.sn + it.hv * a.h0.sh + k * a.h0.sk + v * a.h0.sv] : 0.f;
    }
    publish_state(tH, thr_h.partition_C(sH));
    if constexpr (keep)
      if (it.nchunks > 0) keep_for_backward(sVn, 0);

    Tensor tO = partition_fragment_C(mma_wh, Shape<Int<kC>, Int<kBV>>{});   // fp32 [C, BV]: output
    Tensor tWH = partition_fragment_C(mma_wh, Shape<Int<kC>, Int<kBV>>{});  // fp32 [C, BV]: w H
    Tensor cO = thr_wh.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kBV>>{}));
    Tensor tS = partition_fragment_C(mma_s, Shape<Int<kC>, Int<kC>>{});  // fp32 [C, C]: Q K^T
    Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kC>>{}));
    Tensor rA = make_tensor<Element>(attn::acc_as_operand_a_layout(tS.layout()));  // Aqk as an A operand
    const int r0 = get<0>(cO(0));  // this thread's output rows: r0 and r0 + 8
    auto half = [&](int i) { return (get<0>(cO(i)) - r0) / 8; };
    auto identity = [](int, float x) { return x; };
    for (int j = 0; j < it.nchunks; ++j) {
      const int s = j % T::kStages;
      auto& st = sm.stage[s];
      const float* gamma = sm.gamma[s];
      Tensor sQ = make_tensor(make_smem_ptr(st.q.data()), typename T::LayoutRowsDK{});    // [C, DK]
      Tensor sK = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDK{});    // [C, DK]
      Tensor sKt = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDKt{});  // [DK, C]
      Tensor sW = make_tensor(make_smem_ptr(st.w.data()), typename T::LayoutRowsDK{});    // [C, DK]
      Tensor sU = make_tensor(make_smem_ptr(st.u.data()), typename T::LayoutRowsBV{});    // [C, BV]: u, then O
      ChunkBarriers::sync(ChunkBarriers::kFull + s, 256);
      // WGMMA groups complete in issue order: w H (the state's path) first, then Q H.
      {
        Tensor tA_W = thr_wh.partition_fragment_A(sW);
        Tensor tA_Q = thr_wh.partition_fragment_A(sQ);
        Tensor tB_H = thr_wh.partition_fragment_B(sHt);
        attn::gemm_zero<false>(mma_wh, tA_W, tB_H, tWH);
        if constexpr (output) attn::gemm_zero<false>(mma_wh, tA_Q, tB_H, tO);
      }
      // gamma is in log2 units: exp(x) = ex2(x log2 e).
      const float g_last = gamma[kC - 1];
      const float gamma_r[2] = {gamma[r0], gamma[r0 + 8]};
      const float dv_scale[2] = {ex2(g_last - gamma_r[0]), ex2(g_last - gamma_r[1])};
      Tensor tUs = thr_wh.partition_C(sU);
      if constexpr (output) warpgroup_wait<1>();  // w H
      else warpgroup_wait<0>();
      CUTE_UNROLL
      for (int i = 0; i < size(tWH); i += 2) {  // v_new = u - w H, in place of w H
        const uint32_t raw = ld_shared_b32(&tUs(i));  // columns i, i + 1: adjacent in the tile
        const auto u2 = reinterpret_cast<const cutlass::Array<Element, 2>&>(raw);
        tWH(i) = float(u2[0]) - tWH(i);
        tWH(i + 1) = float(u2[1]) - tWH(i + 1);
      }
      store_pairs<Element>(tWH, thr_wh.partition_C(sVn), identity);  // for Aqk v_new and / or the backward
      store_pairs<Element>(tWH, thr_wh.partition_C(sDv), [&](int i, float x) { return x * dv_scale[half(i)]; });
      const float decay = ex2(g_last);
      CUTE_UNROLL
      for (int i = 0; i < size(tH); ++i) tH(i) *= decay;
      cutlass::arch::fence_view_async_shared();
      sync();  // v_new and D v_new complete
      {  // H += K^T (D v_new), then S = Q K^T
        Tensor tA_Kt = thr_h.partition_fragment_A(sKt);
        Tensor tB_Dv = thr_h.partition_fragment_B(sDvt);
        Tensor tS_Q = thr_s.partition_fragment_A(sQ);
        Tensor tS_K = thr_s.partition_fragment_B(sK);
        attn::gemm_ss(mma_h, tA_Kt, tB_Dv, tH);
        if constexpr (output) attn::gemm_zero<false>(mma_s, tS_Q, tS_K, tS);
      }
      if constexpr (!output) {  // the state's path alone: the stage is free once H is updated
        warpgroup_wait<0>();
        ChunkBarriers::arrive(ChunkBarriers::kEmpty + s, 256);
        publish_state(tH, thr_h.partition_C(sH));
        if constexpr (keep) keep_for_backward(sVn, j + 1);
      } else {
        warpgroup_wait<1>();  // Q H and the new H: publish H for the next chunk while S runs
        publish_state(tH, thr_h.partition_C(sH));
        const float o_scale[2] = {a.scale * ex2(gamma_r[0]), a.scale * ex2(gamma_r[1])};
        CUTE_UNROLL
        for (int i = 0; i < size(tO); ++i) tO(i) *= o_scale[half(i)];
        warpgroup_wait<0>();
        CUTE_UNROLL
        for (int i = 0; i < size(tS); ++i) {  // Aqk = scale tril(Q K^T) * Gamma (diagonal included)
          const int r = get<0>(cS(i)), c = get<1>(cS(i));
          tS(i) = c <= r ? a.scale * tS(i) * ex2(gamma_r[(r - r0) / 8] - gamma[c]) : 0.f;
        }
        attn::convert_into(make_tensor(tS.data(), rA.layout()), rA);
        {
          Tensor tB_Vn = thr_av.partition_fragment_B(sVnt);
          attn::gemm_rs(mma_av, rA, tB_Vn, tO);
        }
        warpgroup_wait<0>();
        store_pairs<Element>(tO, tUs, identity);  // u is consumed: its buffer takes O for the loader
        ChunkBarriers::arrive(ChunkBarriers::kEmpty + s, 256);
        if constexpr (keep) keep_for_backward(sVn, j + 1);
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
