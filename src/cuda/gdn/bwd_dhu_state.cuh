// src/cuda/gdn/bwd_dhu_state.cuh — warpgroup 1 of the bwd_dhu kernel: carries dH [DK, BV] (the
// gradient of the current chunk's end state) in fp32 registers from dht (or 0) back through the
// sequence's chunks, and writes dh0 at the start. With the sequence split (bwd_dhu_split.cuh) it
// runs one segment's chunks, from where dhu_start says (or the identity's columns: a virtual
// block), to where dhu_end says.
//
// Per chunk j, from the last (stage published by the loader: rows, row factors fq / fk, decays,
// do already scaled by fq):
//   dv2 = dv + diag(fk) K dH   (SS; dH's 16-bit copy = dh[j], read MN-major; 0 past the end)
//   dH *= e^G_last ; dH += Q^T (fq do)     (SS, runs while dv2 is formed)
//   dv2 into dv's buffer (16-bit) ; dH += (-w)^T dv2    (SS, the WGMMA negates w)
//   dH's 16-bit copy for chunk j - 1, in the other dh buffer (once the loader has written that
//   buffer's previous tile out).
#pragma once
#include <cutlass/arch/barrier.h>

#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/bwd_dhu_args.cuh"
#include "src/cuda/gdn/bwd_dhu_ends.cuh"
#include "src/cuda/gdn/bwd_dhu_split.cuh"
#include "src/cuda/gdn/bwd_dhu_traits.cuh"

namespace attnkit::cuda::gdn {

template <class T>
struct DhuStateWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  const BwdDhuArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  static CUTE_DEVICE void sync() { ChunkBarriers::sync(DhuBarriers::kState, 128); }

  // dH's 16-bit copy for the GEMMs and dh. The next step's "full" barrier (every state thread
  // takes part) orders these writes before its GEMMs; the first publish syncs itself.
  template <class TH, class SH>
  CUTE_DEVICE void publish(const TH& tdH, SH&& tdHs) const {
    store_pairs<Element>(tdH, tdHs, [](int, float x) { return x; });
    cutlass::arch::fence_view_async_shared();
  }

  // The ends' tiles: the start's in the two dh buffers (free until the first publish), the end's
  // in stage 0's Q, K, w rows (free once the last GEMM has completed: the loader's last stores
  // read dv2 and dh only). Each array is whole KB (array_aligned<.., 1024>): no gaps between them.
  static constexpr int kTileBytes = kDK * kBV * 4;
  static_assert(kTileBytes <= 2 * kDK * kBV * sizeof(Element) && kDK * kBV * sizeof(Element) % 1024 == 0,
                "the start's tile within dh[0], dh[1]");
  static_assert(kTileBytes <= 3 * kC * kDK * sizeof(Element) && kC * kDK * sizeof(Element) % 1024 == 0,
                "the end's tile within stage 0's q, k, w");

  CUTE_DEVICE void run() {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    typename T::MmaDv mma_dv;
    typename T::MmaDh mma_dh;
    typename T::MmaDhNeg mma_dh_neg;
    auto thr_dv = mma_dv.get_thread_slice(tid);
    auto thr_dh = mma_dh.get_thread_slice(tid);
    auto thr_dh_neg = mma_dh_neg.get_thread_slice(tid);

    // dH, fp32 [DK, BV] over the warpgroup, from dht (or 0), a segment's start, or I's columns.
    Tensor tdH = partition_fragment_C(mma_dh, Shape<Int<kDK>, Int<kBV>>{});
    Tensor cdH = thr_dh.partition_C(make_identity_tensor(Shape<Int<kDK>, Int<kBV>>{}));
    const int v0 = it.vb * kBV;
    // The start: fp32 rows by 16-byte pieces through shared memory (bwd_dhu_ends.cuh), else its
    // dtype switched on once for the fragment's elements (load_any_floats); only when there is one
    // (chunk_fwd_state.cuh's h0: a presence check per element walks every CTA through all the
    // switches' code).
    const StateTensor start = dhu_start(a, it, kDK, a.v_blocks * kBV);
    CUTE_UNROLL
    for (int i = 0; i < size(tdH); ++i) tdH(i) = 0.f;
    if (dhu_virtual(a, it)) {
      const int c0 = (it.vb - a.v_blocks) * kBV;  // column c0 + v of I
      CUTE_UNROLL
      for (int i = 0; i < size(tdH); ++i) tdH(i) = get<0>(cdH(i)) == c0 + get<1>(cdH(i)) ? 1.f : 0.f;
    } else if (start.data.ptr != nullptr) {
      const int64_t base = it.n * start.sn + it.hv * start.sh;
      const float* first = static_cast<const float*>(start.data.ptr) + base + v0;
      float start_values[decltype(size(tdH))::value];
      auto set = [&](int i, float x) { start_values[i] = x; };
      if (kBV >= 32 && start.data.dtype == DType::kFloat32 && rows_in_pieces(first, start.sk, start.sv)) {
        if constexpr (kBV >= 32)
          load_by_rows(first, start.sk, cdH, set, DhTile<kDK, kBV>{reinterpret_cast<float*>(sm.dh[0].data())}, tid,
                       [] { sync(); });
      } else {
        load_any_floats<decltype(size(tdH))::value>(
            start.data, base, [&](int i) { return get<0>(cdH(i)) * start.sk + (v0 + get<1>(cdH(i))) * start.sv; },
            set);
      }
      CUTE_UNROLL  // into the accumulator past the paths' join: written on each of them, ptxas
      for (int i = 0; i < size(tdH); ++i) tdH(i) = start_values[i];  // serialised every WGMMA (C7514)
    }
    const int n = it.nchunks;
    auto dh_tile = [&](int buf) { return make_tensor(make_smem_ptr(sm.dh[buf].data()), typename T::LayoutDh{}); };
    if (n > 0) publish(tdH, thr_dh.partition_C(dh_tile(0)));
    sync();

    Tensor tDv = partition_fragment_C(mma_dv, Shape<Int<kC>, Int<kBV>>{});  // fp32 [C, BV]: K dH
    Tensor cDv = thr_dv.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kBV>>{}));
    for (int i = 0; i < n; ++i) {
      const int s = i % T::kStages, buf = i % 2;
      auto& st = sm.stage[s];
      Tensor sK = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDK{});      // [C, DK]
      Tensor sQt = make_tensor(make_smem_ptr(st.q.data()), typename T::LayoutRowsDKt{});    // [DK, C]
      Tensor sWt = make_tensor(make_smem_ptr(st.w.data()), typename T::LayoutRowsDKt{});    // [DK, C]
      Tensor sDot = make_tensor(make_smem_ptr(st.dout.data()), typename T::LayoutRowsBVt{});  // [BV, C]: fq do
      Tensor sDv = make_tensor(make_smem_ptr(st.dv.data()), typename T::LayoutRowsBV{});    // [C, BV]: dv, then dv2
      Tensor sDv2t = make_tensor(make_smem_ptr(st.dv.data()), typename T::LayoutRowsBVt{});  // [BV, C]
      Tensor sDht = make_tensor(make_smem_ptr(sm.dh[buf].data()), typename T::LayoutDht{});  // [BV, DK]
      ChunkBarriers::sync(DhuBarriers::kFull + s, T::kFullThreads);
      {
        Tensor tA = thr_dv.partition_fragment_A(sK);
        Tensor tB = thr_dv.partition_fragment_B(sDht);
        attn::gemm_zero<false>(mma_dv, tA, tB, tDv);
      }
      // dH is scaled once no GEMM is in flight: ptxas waits for all of them before any register
      // an in-flight GEMM could own is touched (C7517), which would serialise the same way.
      warpgroup_wait<0>();  // Kd dH
      CUTE_UNROLL
      for (int e = 0; e < size(tdH); ++e) tdH(e) *= sm.decay[s][get<0>(cdH(e))];
      {  // runs while dv2 is formed below
        Tensor tA = thr_dh.partition_fragment_A(sQt);
        Tensor tB = thr_dh.partition_fragment_B(sDot);
        attn::gemm_ss(mma_dh, tA, tB, tdH);
      }
      // dv2 = dv + fk K dH in place of dv (columns e, e + 1 adjacent; 0 on rows past the end,
      // whose dv and w may be other tokens'): every load issued before the first store, which the
      // asm's memory clobber would otherwise keep in order, one round trip each.
      Tensor tDvs = thr_dv.partition_C(sDv);
      uint32_t dv_pairs[size(tDv) / 2];
      float fk[size(tDv) / 2];
      CUTE_UNROLL
      for (int e = 0; e < size(tDv); e += 2) {
        dv_pairs[e / 2] = ld_shared_b32(&tDvs(e));
        fk[e / 2] = __half2float(sm.fk[s][get<0>(cDv(e))]);
      }
      const int valid = it.valid_rows(it.nchunks - 1 - i);
      CUTE_UNROLL
      for (int e = 0; e < size(tDv); e += 2) {
        const auto dv = reinterpret_cast<const cutlass::Array<Element, 2>&>(dv_pairs[e / 2]);
        const bool live = get<0>(cDv(e)) < valid;
        const float x0 = live ? float(dv[0]) + fk[e / 2] * tDv(e) : 0.f;
        const float x1 = live ? float(dv[1]) + fk[e / 2] * tDv(e + 1) : 0.f;
        st_shared(&tDvs(e), pack2<Element>(x0, x1));
      }
      cutlass::arch::fence_view_async_shared();
      sync();  // dv2 complete
      {
        Tensor tA = thr_dh_neg.partition_fragment_A(sWt);
        Tensor tB = thr_dh_neg.partition_fragment_B(sDv2t);
        attn::gemm_ss(mma_dh_neg, tA, tB, tdH);
      }
      warpgroup_wait<0>();
      // The other dh buffer held step i - 1's tile: wait until the loader has written it out. The
      // wait comes before this step's "empty" signal, which lets the loader on to its next "dh
      // free" arrival: two arrivals can never meet at the barrier without this wait between them.
      const bool next = i + 1 < n;
      if (next && i >= 1) ChunkBarriers::sync(DhuBarriers::kDhFree, DhuBarriers::kDhFreeThreads);
      ChunkBarriers::arrive(DhuBarriers::kEmpty + s, DhuBarriers::kEmptyThreads);  // the loader writes dv2 and dh[j] out
      if (next) publish(tdH, thr_dh.partition_C(dh_tile(1 - buf)));
    }
    const EndState end = dhu_end(a, it, kDK, kBV);
    if (kBV >= 32 && end.ptr && rows_in_pieces(end.ptr, end.sk, end.sv)) {  // in 16-byte pieces (bwd_dhu_ends.cuh)
      if constexpr (kBV >= 32)
        store_by_rows(end.ptr, end.sk, tdH, cdH, DhTile<kDK, kBV>{reinterpret_cast<float*>(sm.stage[0].q.data())}, tid,
                      [] { sync(); });
    } else if (end.ptr) {
      CUTE_UNROLL
      for (int i = 0; i < size(tdH); ++i) end.ptr[get<0>(cdH(i)) * end.sk + get<1>(cdH(i)) * end.sv] = tdH(i);
    }
  }
};

}  // namespace attnkit::cuda::gdn
