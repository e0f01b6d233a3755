// src/cuda/gdn/chunk_fwd_state.cuh — warpgroup 1 of the recurrence kernel: carries the state,
// transposed, H^T [BV, DK] in fp32 registers (the accumulator of H^T += (D v_new)^T K) through the
// sequence's chunks, leaves each chunk's output rows in shared memory for the loader and, at the
// end, writes the final state.
//
// Everything on the state's path is transposed so that both of its GEMMs take their left operand
// from registers (RS): the state never goes through shared memory, and no barrier sits on the
// chunk-to-chunk chain. Per chunk (stage published by the loader warpgroup, or in
// gdn_chunk_fwd_wu_kernel by the w / u warpgroup; w and u computed by the WY kernel or by that
// warpgroup), in issue order:
//   V'^T = H^T w^T;  O^T = H^T Q^T                      (RS, A = H^T's 16-bit copy, registers)
//   S^T = K Q^T                                          (SS)
//   v_new^T = u^T - V'^T;  H^T *= exp(gamma_last);  H^T += (D v_new)^T K   (RS, K read MN-major)
//   Aqk^T = scale tril(S)^T Gamma^T into shared memory;  O^T = scale exp(gamma) O^T + v_new^T Aqk^T  (RS)
//   H^T's 16-bit copy for the next chunk;  O^T into u's buffer, transposed (stmatrix.trans).
// Q and K come as loaded: with the in-op l2norm their rows' inverse norms are in the loader's
// per-row factors (SharedStorage::gate), applied to D, O's columns and Aqk in fp32.
// The mode (Recurrence, chunk_fwd_args.cuh): kOutputAndStates (a training forward) also keeps each
// chunk's start state and v_new for the backward (a.states, a.vnew): 16-bit copies in sm.h and
// sm.vnew, which the loader writes out after the chunk's "empty", off the state's chain; kStates
// (the backward's rerun) keeps only those, and leaves them in the chunk's stage (Q's and u's
// buffers, unused without output); without output only the state's own path runs.
#pragma once
#include <cutlass/arch/barrier.h>

#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"
#include "src/cuda/gdn/chunk_fwd_split.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"
#include "src/cuda/gdn/transposed_fragments.cuh"

namespace attnkit::cuda::gdn {

template <class T, Recurrence kMode>
struct StateWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  const ChunkFwdArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  static CUTE_DEVICE void sync() { ChunkBarriers::sync(ChunkBarriers::kState, 128); }

  // The initial state (chunk 0's start) for the backward, from sm.h (store_kept): once, before the
  // chunks; the loader writes every later kept tile (chunk_fwd_load.cuh store_output).
  CUTE_DEVICE void keep_initial_state() const {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    Tensor sH = make_tensor(make_smem_ptr(sm.h.data()), typename T::LayoutH{});  // [DK, BV]
    store_kept<T>(a, it, tid, sH, sH, 0);  // j = 0: no v_new
  }

  CUTE_DEVICE void run() {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    constexpr bool output = writes_output(kMode), keep = keeps_states(kMode);
    typename T::MmaVt mma_v;   // H^T w^T, H^T Q^T    [BV, C]
    typename T::MmaS mma_s;    // K Q^T               [C, C]
    typename T::MmaU mma_av;   // v_new^T Aqk^T       [BV, C]
    typename T::MmaHt mma_h;   // (D v_new)^T K       [BV, DK]
    auto thr_v = mma_v.get_thread_slice(tid);
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_av = mma_av.get_thread_slice(tid);
    auto thr_h = mma_h.get_thread_slice(tid);
    Tensor sHt = make_tensor(make_smem_ptr(sm.h.data()), typename T::LayoutHt{});           // [BV, DK]: H^T's view of H
    Tensor sAqk = make_tensor(make_smem_ptr(sm.aqk.data()), typename T::LayoutCC{});    // [C keys, C queries]
    Tensor sAqkt = make_tensor(make_smem_ptr(sm.aqk.data()), typename T::LayoutCCt{});  // [C queries, C keys]

    // The state, fp32 H^T [BV, DK] over the warpgroup, from h0 (or 0), and its 16-bit copy: the
    // A operand of the next chunk's V'^T and O^T (an accumulator re-viewed, as P in attention).
    Tensor tH = partition_fragment_C(mma_h, Shape<Int<kBV>, Int<kDK>>{});
    Tensor cH = thr_h.partition_C(make_identity_tensor(Shape<Int<kBV>, Int<kDK>>{}));
    Tensor rH = make_tensor<Element>(attn::acc_as_operand_a_layout(tH.layout()));
    constexpr int kHPairs = decltype(size(tH))::value / 2;
    // The start: h0 (or 0), or with the sequence split a segment's (chunk_fwd_split.cuh). Its dtype
    // switched on once for the 64 elements (load_any_floats), and only when there is one: a
    // presence check per element made every CTA jump through the switches' ~10 KB of code on its
    // way in, an instruction-cache miss at every jump (ncu: ~10% of a varlen batch's recurrence
    // time), and the switch per element put ~1.4k instructions and ~250 branches on the state
    // warpgroup's path before its first GEMM.
    const StateTensor h0 = start_state(a, it, kDK);
    CUTE_UNROLL
    for (int i = 0; i < size(tH); ++i) tH(i) = 0.f;
    if (it.vb >= a.v_blocks) {  // the split's virtual block: rows (vb - v_blocks) * 64 + r of I
      const int v0 = (it.vb - a.v_blocks) * kBV;
      CUTE_UNROLL
      for (int i = 0; i < size(tH); ++i) tH(i) = v0 + get<0>(cH(i)) == get<1>(cH(i)) ? 1.f : 0.f;
    } else if (h0.data.ptr != nullptr) {
      const int v0 = it.vb * kBV;
      float start_values[decltype(size(tH))::value];
      load_any_floats<decltype(size(tH))::value>(
          h0.data, it.n * h0.sn + it.hv * h0.sh,
          [&](int i) { return get<1>(cH(i)) * h0.sk + (v0 + get<0>(cH(i))) * h0.sv; },
          [&](int i, float x) { start_values[i] = x; });
      CUTE_UNROLL  // into the accumulator past the switch's join: written on its four paths, ptxas
      for (int i = 0; i < size(tH); ++i) tH(i) = start_values[i];  // serialised every WGMMA (C7514)
    }
    attn::convert_into(make_tensor(tH.data(), rH.layout()), rH);
    if constexpr (keep) {
      if (it.nchunks > 0) {
        store_transposed(as_pairs<kHPairs>(rH), sHt);
        sync();
        keep_initial_state();
      }
    }

    Tensor tV = partition_fragment_C(mma_v, Shape<Int<kBV>, Int<kC>>{});  // fp32 [BV, C]: V'^T, then v_new^T
    Tensor tO = partition_fragment_C(mma_v, Shape<Int<kBV>, Int<kC>>{});  // fp32 [BV, C]: O^T
    Tensor cV = thr_v.partition_C(make_identity_tensor(Shape<Int<kBV>, Int<kC>>{}));
    Tensor tS = partition_fragment_C(mma_s, Shape<Int<kC>, Int<kC>>{});  // fp32 [C keys, C queries]: K Q^T
    Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kC>>{}));
    Tensor rVn = make_tensor<Element>(attn::acc_as_operand_a_layout(tV.layout()));  // v_new^T, A of O^T
    Tensor rDv = make_tensor<Element>(attn::acc_as_operand_a_layout(tV.layout()));  // (D v_new)^T, A of H^T
    constexpr int kVPairs = decltype(size(tV))::value / 2;
    for (int j = 0; j < it.nchunks; ++j) {
      const int s = j % T::kStages;
      auto& st = sm.stage[s];
      Tensor sQ = make_tensor(make_smem_ptr(st.q.data()), typename T::LayoutRowsDK{});    // [C, DK]
      Tensor sK = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDK{});    // [C, DK]
      Tensor sKt = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDKt{});  // [DK, C]
      Tensor sW = make_tensor(make_smem_ptr(st.w.data()), typename T::LayoutRowsDK{});    // [C, DK]
      Tensor sUt = make_tensor(make_smem_ptr(st.u.data()), typename T::LayoutRowsBVt{});  // [BV, C]: u^T, then O^T
      ChunkBarriers::sync(ChunkBarriers::kFull + s, 256);  // the loader's (or the w / u warpgroup's) arrivals and ours
      // WGMMA groups complete in issue order: V'^T (the state's path) first.
      {
        Tensor tB_W = thr_v.partition_fragment_B(sW);
        Tensor tB_Q = thr_v.partition_fragment_B(sQ);
        attn::gemm_zero<true>(mma_v, rH, tB_W, tV);
        if constexpr (output) {
          attn::gemm_zero<true>(mma_v, rH, tB_Q, tO);
          Tensor tS_K = thr_s.partition_fragment_A(sK);
          Tensor tS_Q = thr_s.partition_fragment_B(sQ);
          attn::gemm_zero<false>(mma_s, tS_K, tS_Q, tS);
        }
      }
      // u^T, 16-bit pairs in tV's order, read while the GEMMs run: read after them, the
      // ldmatrix waited behind their shared-memory reads (ncu, v8 at B4: ~200 cycles a chunk).
      uint32_t u2[kVPairs];
      load_transposed(u2, sUt);
      if constexpr (output) warpgroup_wait<1>();  // V'^T, O^T
      else warpgroup_wait<0>();
      const float* gate = sm.gate[s][1];  // D's factor per row: n_k exp(gamma_last - gamma), 0 past the end
      CUTE_UNROLL
      for (int p = 0; p < kVPairs; ++p) {  // v_new^T = u^T - V'^T; pair p is columns c, c + 1
        const auto u = reinterpret_cast<const cutlass::Array<Element, 2>&>(u2[p]);
        const int c = get<1>(cV(2 * p));
        const float2 d = *reinterpret_cast<const float2*>(&gate[c]);
        const float x0 = float(u[0]) - tV(2 * p), x1 = float(u[1]) - tV(2 * p + 1);
        rVn(2 * p) = Element(x0);
        rVn(2 * p + 1) = Element(x1);
        rDv(2 * p) = Element(x0 * d.x);
        rDv(2 * p + 1) = Element(x1 * d.y);
      }
      const float decay = ex2(sm.gamma[s][kC - 1]);
      CUTE_UNROLL
      for (int i = 0; i < size(tH); ++i) tH(i) *= decay;
      {
        Tensor tB_K = thr_h.partition_fragment_B(sKt);
        attn::gemm_rs(mma_h, rDv, tB_K, tH);
      }
      // v_new's copy for the loader to write out once the stage is released: kStates over u^T in the
      // stage (each warp writes exactly the addresses its load_transposed read), kOutputAndStates
      // (u's buffer takes O) into sm.vnew[j % 2], which the loader read out for chunk j - 2 before
      // the "kept free" barrier of chunk j - 1.
      if constexpr (kMode == Recurrence::kStates) {
        store_transposed(as_pairs<kVPairs>(rVn), sUt);
      } else if constexpr (keep) {
        Tensor sVnt = make_tensor(make_smem_ptr(sm.vnew[j % 2].data()), typename T::LayoutRowsBVt{});  // [BV, C]
        store_transposed(as_pairs<kVPairs>(rVn), sVnt);
      }
      if constexpr (output) {
        warpgroup_wait<1>();  // S^T
        const float* gamma = sm.gamma[s];
        const float* q_factor = sm.gate[s][2];
        const float* k_factor = sm.gate[s][3];
        // Aqk^T = scale tril(Q K^T)^T Gamma^T (diagonal included), n_q n_k: in place over S^T's
        // accumulator first, then stored. Not in one loop: each store's memory clobber made the
        // compiler re-read every gate factor after it, and the pass ran one dependent
        // load -> ex2 -> multiply chain per pair (ncu, v8 at B4: ~40% of the state's time).
        CUTE_UNROLL
        for (int i = 0; i < size(tS); i += 2) {
          const int r = get<0>(cS(i)), c = get<1>(cS(i));  // key r, queries c and c + 1
          const float g_r = gamma[r], n_r = k_factor[r];
          const float2 f = *reinterpret_cast<const float2*>(&q_factor[c]);
          const float2 g_c = *reinterpret_cast<const float2*>(&gamma[c]);
          tS(i) = r <= c ? tS(i) * n_r * f.x * ex2(g_c.x - g_r) : 0.f;
          tS(i + 1) = r <= c + 1 ? tS(i + 1) * n_r * f.y * ex2(g_c.y - g_r) : 0.f;
        }
        CUTE_UNROLL
        for (int i = 0; i < size(tS); i += 2) st_shared(&sAqk(get<0>(cS(i)), get<1>(cS(i))), pack2<Element>(tS(i), tS(i + 1)));
        const float* o_scale = sm.gate[s][0];  // O's factor per query row: scale n_q exp(gamma)
        CUTE_UNROLL
        for (int i = 0; i < size(tO); i += 2) {
          const float2 g = *reinterpret_cast<const float2*>(&o_scale[get<1>(cV(i))]);
          tO(i) *= g.x;
          tO(i + 1) *= g.y;
        }
        cutlass::arch::fence_view_async_shared();
        sync();  // Aqk^T complete
        {
          Tensor tB_A = thr_av.partition_fragment_B(sAqkt);
          attn::gemm_rs(mma_av, rVn, tB_A, tO);
        }
        warpgroup_wait<1>();  // the new H^T
      } else {
        warpgroup_wait<0>();
      }
      attn::convert_into(make_tensor(tH.data(), rH.layout()), rH);  // for the next chunk
      if constexpr (kMode == Recurrence::kStates) {
        // The next chunk's start state into the stage's Q buffer (no Q without output): the loader
        // writes it out after "empty", so nothing here waits for the stores.
        if (j + 1 < it.nchunks) {
          Tensor sHtStage = make_tensor(make_smem_ptr(st.q.data()), typename T::LayoutHt{});  // [BV, DK]
          store_transposed(as_pairs<kHPairs>(rH), sHtStage);
        }
      } else if constexpr (keep) {
        // The next start state into sm.h once the loader has written chunk j - 1's out (a chunk of
        // slack: it did so right after that chunk's "empty").
        if (j + 1 < it.nchunks) {
          if (j >= 1) ChunkBarriers::sync(ChunkBarriers::kKeptFree, 256);
          store_transposed(as_pairs<kHPairs>(rH), sHt);
        }
      }
      if constexpr (output) {
        warpgroup_wait<0>();
        uint32_t o2[kVPairs];
        CUTE_UNROLL
        for (int p = 0; p < kVPairs; ++p) o2[p] = pack2<Element>(tO(2 * p), tO(2 * p + 1));
        store_transposed(o2, sUt);  // u is consumed: its buffer takes O for the loader
        cutlass::arch::fence_view_async_shared();  // the loader may store it by TMA
      }
      if constexpr (kMode == Recurrence::kStates) cutlass::arch::fence_view_async_shared();  // v_new, H: stored by TMA
      ChunkBarriers::arrive(ChunkBarriers::kEmpty + s, 256);  // the loader writes O and the kept tiles out
    }
    const EndState end = end_state(a, it, kDK);  // ht, or the split's end states
    if (end.ptr) {
      CUTE_UNROLL
      for (int i = 0; i < size(tH); ++i) end.ptr[get<1>(cH(i)) * end.sk + get<0>(cH(i)) * end.sv] = tH(i);
    }
  }
};

}  // namespace attnkit::cuda::gdn
