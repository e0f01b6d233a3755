// src/cuda/gdn/bwd_dhu_load.cuh — warpgroup 0 of the bwd_dhu kernel: stages each chunk's rows of
// Q, K (the head's), w (the value head's), do and dv (this CTA's value columns), from the last
// chunk to the first, with the gates' row factors (bwd_dhu_traits.cuh):
//   fq_r = scale e^G_r, fk_r = e^(G_last - G_r) for rows r < valid, 0 past the sequence end;
//   decay[d] = e^G_last[d];   do <- diag(fq) do in place
// and, once the state warpgroup is done with a chunk, writes its dv2 rows (left in dv's buffer)
// and its dh tile out.
//
// Rows come by TMA (one thread, five boxes on the stage's transaction barrier) when every row
// start is 16-byte aligned, else by cp.async (zero-filled past the sequence end). Either way rows
// past the end may hold other tokens (TMA reads on into the next sequence of a packed batch):
// do's are zeroed by fq = 0 and the state zeroes dv2's, so they never reach dH. The gates come by
// cp.async, two chunks ahead like the rows.
#pragma once
#include <cutlass/arch/barrier.h>

#include "src/cuda/gdn/bwd_dhu_args.cuh"
#include "src/cuda/gdn/bwd_dhu_traits.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"

namespace attnkit::cuda::gdn {

template <class T>
struct DhuLoadWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  const BwdDhuParams<T>& p;
  const BwdDhuArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  using PiecesDK = ChunkPieces<kDK, typename T::LayoutRowsDK>;  // Q, K, w (cp.async path)
  using PiecesBV = ChunkPieces<kBV, typename T::LayoutRowsBV>;  // do, dv, dv2
  using PiecesDh = ChunkPieces<kBV, typename T::LayoutDh, kDK>;  // dh (offsets only)

  static CUTE_DEVICE void sync() { ChunkBarriers::sync(ChunkBarriers::kLoad, 128); }
  static CUTE_DEVICE auto& smem() { return chunk_smem<typename T::SharedStorage>(); }
  // Step i of the sequence's walk works on chunk nchunks - 1 - i.
  CUTE_DEVICE int chunk_of(int i) const { return it.nchunks - 1 - i; }

  // One [C, D] box of chunk j of `head` in x (columns from box column `col`) into `dst` by TMA.
  template <class SmemLayout, class Tma>
  CUTE_DEVICE void tma_box(const Tma& tma, const typename T::GmemShape& shape, int head, int j, int col, Element* dst,
                           uint64_t& bar) const {
    Tensor m = tma.get_tma_tensor(shape)(_, _, head, int(it.b));  // (t, d)
    constexpr int kCols = cute::size<1>(SmemLayout{});
    Tensor g = local_tile(domain_offset(make_coord(int(it.t0), _0{}), m), Shape<Int<kC>, Int<kCols>>{}, make_coord(j, col));
    Tensor s = make_tensor(make_smem_ptr(dst), SmemLayout{});
    auto [tg, ts] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(s), group_modes<0, 2>(g));
    copy(tma.with(bar), tg, ts);
  }

  CUTE_DEVICE void load_chunk(const PiecesDK& dk, const PiecesBV& bv, int i) {
    auto& sm = smem();
    const int s = i % T::kStages, j = chunk_of(i), valid = it.valid_rows(j);
    auto& st = sm.stage[s];
    if (a.vec16) {
      if (tid == 0) {
        uint64_t& bar = reinterpret_cast<uint64_t&>(sm.rows_landed[s]);
        cutlass::arch::fence_view_async_shared();  // this stage's earlier generic reads and writes first
        sm.rows_landed[s].arrive_and_expect_tx(T::kTmaBytes);
        tma_box<typename T::LayoutRowsDK>(p.tma_q, p.shape_qk, it.h, j, 0, st.q.data(), bar);
        tma_box<typename T::LayoutRowsDK>(p.tma_k, p.shape_qk, it.h, j, 0, st.k.data(), bar);
        tma_box<typename T::LayoutRowsDK>(p.tma_w, p.shape_w, it.hv, j, 0, st.w.data(), bar);
        tma_box<typename T::LayoutRowsBV>(p.tma_do, p.shape_v, it.hv, j, it.vb, st.dout.data(), bar);
        tma_box<typename T::LayoutRowsBV>(p.tma_dv, p.shape_v, it.hv, j, it.vb, st.dv.data(), bar);
      }
    } else {
      auto at = [](const auto* x) { return cute::cast_smem_ptr_to_uint(x); };
      dk.copy(at(st.q.data()), static_cast<const Element*>(a.q.ptr), a.q, it, it.h, j, valid, false);
      dk.copy(at(st.k.data()), static_cast<const Element*>(a.k.ptr), a.k, it, it.h, j, valid, false);
      dk.copy(at(st.w.data()), static_cast<const Element*>(a.w.ptr), a.w, it, it.hv, j, valid, false);
      const int64_t v0 = int64_t(it.vb) * kBV;
      bv.copy(at(st.dout.data()), static_cast<const Element*>(a.dout.ptr) + v0, a.dout, it, it.hv, j, valid, false);
      bv.copy(at(st.dv.data()), static_cast<const Element*>(a.dv.ptr) + v0, a.dv, it, it.hv, j, valid, false);
    }
    if (!a.gate) return;
    // G of row tid (clamped to the last valid row) and G_last of key tid.
    const float* g = a.gate + it.b * a.g_sb + (it.t0 + int64_t(j) * kC) * a.g_st + int64_t(it.hv) * a.g_sh;
    const float* last = g + int64_t(valid - 1) * a.g_st;
    if (a.per_key_gate) {
      if (tid < kDK) copy4_async(&sm.decay[s][tid], last + tid);
    } else {
      if (tid < kC) copy4_async(&sm.decay[s][tid], g + int64_t(min(tid, valid - 1)) * a.g_st);
      if (tid == kC) copy4_async(&sm.gate_last[s], last);
    }
  }

  // Step i's row factors and decays, then do <- diag(fq) do (this thread's pieces).
  CUTE_DEVICE void fold_gates(const PiecesBV& bv, int i) {
    constexpr float kLog2e = 1.4426950408889634f;
    auto& sm = smem();
    const int s = i % T::kStages, valid = it.valid_rows(chunk_of(i));
    const bool scalar = a.gate && !a.per_key_gate;
    // Thread tid converts its own slot decay[tid]: G of row tid (scalar gate) or G_last of key tid.
    const float mine = a.gate && tid < kDK ? sm.decay[s][tid] * kLog2e : 0.f;
    const float last = scalar ? sm.gate_last[s] * kLog2e : mine;
    if (tid < kC) {
      const float G = scalar ? mine : 0.f;
      const bool live = tid < valid;
      sm.fq[s][tid] = __float2half_rn(live ? a.scale * ex2(G) : 0.f);
      sm.fk[s][tid] = __float2half_rn(live ? (scalar ? ex2(last - G) : 1.f) : 0.f);  // gk: K comes gated
    }
    if (tid < kDK) sm.decay[s][tid] = a.gate ? ex2(last) : 1.f;
    sync();  // every row's fq
    const uint32_t do0 = cute::cast_smem_ptr_to_uint(sm.stage[s].dout.data());
    CUTE_UNROLL
    for (int piece = 0; piece < PiecesBV::kPieces; ++piece) {
      const float f = __half2float(sm.fq[s][bv.r + piece * PiecesBV::kStep]);
      uint4 raw = ld_shared_v4(do0 + bv.offset[piece]);
      auto& x = reinterpret_cast<cutlass::Array<Element, 8>&>(raw);
      CUTE_UNROLL
      for (int e = 0; e < 8; ++e) x[e] = Element(float(x[e]) * f);
      st_shared(do0 + bv.offset[piece], raw);
    }
  }

  // 8 elements to dst: one 16-byte store, or element by element `stride` apart.
  static CUTE_DEVICE void store8(Element* dst, uint4 v, bool vec16, int64_t stride) {
    if (vec16) {
      st_global_v4(dst, v);
    } else {
      const auto& x = reinterpret_cast<const cutlass::Array<Element, 8>&>(v);
      CUTE_UNROLL
      for (int e = 0; e < 8; ++e) dst[e * stride] = x[e];
    }
  }

  // Once the state warpgroup is done with step i: the chunk's dv2 rows and its dh tile out, each
  // thread its pieces (all shared loads issued before the first store).
  CUTE_DEVICE void store_outputs(const PiecesBV& bv, const PiecesDh& dhp, int i) {
    const int s = i % T::kStages, j = chunk_of(i), valid = it.valid_rows(j);
    ChunkBarriers::sync(ChunkBarriers::kEmpty + s, 256);
    auto& sm = smem();
    const uint32_t dv2_tile = cute::cast_smem_ptr_to_uint(sm.stage[s].dv.data());
    uint4 rows[PiecesBV::kPieces];
    CUTE_UNROLL
    for (int p = 0; p < PiecesBV::kPieces; ++p) rows[p] = ld_shared_v4(dv2_tile + bv.offset[p]);
    const uint32_t dh_tile = cute::cast_smem_ptr_to_uint(sm.dh[i % 2].data());
    uint4 tile[PiecesDh::kPieces];
    CUTE_UNROLL
    for (int p = 0; p < PiecesDh::kPieces; ++p) tile[p] = ld_shared_v4(dh_tile + dhp.offset[p]);

    Element* dv2 = static_cast<Element*>(a.dv2.ptr) + int64_t(it.vb) * kBV + bv.c + it.row(a.dv2, int64_t(j) * kC + bv.r, it.hv);
    CUTE_UNROLL
    for (int p = 0; p < PiecesBV::kPieces; ++p)
      if (bv.r + p * PiecesBV::kStep < valid) store8(dv2 + int64_t(p) * PiecesBV::kStep * a.dv2.st, rows[p], a.dv2_vec16, 1);
    // dh[chunk] [DK, BV]: 16-byte pieces along the value axis.
    const int64_t chunk = (a.chunk_offsets ? a.chunk_offsets[it.n] : 0) + j;
    Element* dh = static_cast<Element*>(a.dh) + it.b * a.dh_sb + chunk * a.dh_sc + int64_t(it.hv) * a.dh_sh +
                  (int64_t(it.vb) * kBV + dhp.c) * a.dh_sv + int64_t(dhp.r) * a.dh_sk;
    CUTE_UNROLL
    for (int p = 0; p < PiecesDh::kPieces; ++p) store8(dh + int64_t(p) * PiecesDh::kStep * a.dh_sk, tile[p], a.dh_vec16, a.dh_sv);
    // The state warpgroup refills this buffer two steps later (bwd_dhu_state.cuh): it waits for
    // this signal from every step but the last two, whose buffers are never refilled.
    if (i + 2 < it.nchunks) ChunkBarriers::arrive(ChunkBarriers::kDhFree, 256);
  }

  CUTE_DEVICE void run() {
    const int n = it.nchunks;
    auto& sm = smem();
    const PiecesDK dk(tid, sm.stage[0].q.data());
    const PiecesBV bv(tid, sm.stage[0].dout.data());
    const PiecesDh dhp(tid, sm.dh[0].data());
    load_chunk(dk, bv, 0);  // n >= 1 here
    cp_async_commit();
    if (n > 1) load_chunk(dk, bv, 1);
    cp_async_commit();
    for (int i = 0; i < n; ++i) {
      const int s = i % T::kStages;
      cp_async_wait<1>();  // this thread's copies of step i landed (i + 1 may be in flight)
      if (a.vec16) sm.rows_landed[s].wait((i / T::kStages) % 2);
      sync();  // everyone's copies (the gates of every row)
      fold_gates(bv, i);
      cutlass::arch::fence_view_async_shared();  // the state warpgroup's WGMMAs read these rows
      ChunkBarriers::arrive(ChunkBarriers::kFull + s, 256);
      // Step i + 2 goes where step i - 1 was, once that step's outputs are out.
      if (i >= 1) store_outputs(bv, dhp, i - 1);
      if (i + 2 < n) {
        if (i >= 1) sync();  // every read of step i - 1's buffers is done
        load_chunk(dk, bv, i + 2);
      }
      cp_async_commit();
    }
    store_outputs(bv, dhp, n - 1);
  }
};

}  // namespace attnkit::cuda::gdn
