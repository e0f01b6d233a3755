// src/cuda/gdn/bwd_dhu_load.cuh — warpgroup 0 of the bwd_dhu kernel: stages each chunk's rows of
// Q, K (the head's), w (the value head's), do and dv (this CTA's value columns), from the last
// chunk to the first, with the gates' row factors (bwd_dhu_traits.cuh):
//   fq_r = scale e^G_r, fk_r = e^(G_last - G_r) for rows r < valid, 0 past the sequence end;
//   decay[d] = e^G_last[d];   do <- diag(fq) do in place
// and, once the state warpgroup is done with a chunk, writes its dv2 rows (left in dv's buffer)
// and its dh tile out.
//
// Rows come by TMA (one thread, five boxes on the stage's transaction barrier) when every row
// start is 16-byte aligned, else by cp.async (zero-filled past the sequence end); each stage is
// refilled as soon as its previous step's outputs are read out of it (three steps ahead). A TMA
// box reads on past a sequence's end into the next sequence's rows: those rows are zeroed where
// they land, so the state warpgroup gets zeros past the end either way (fq = 0 there too, which
// alone would not keep a NaN out: 0 * NaN = NaN). The gates come by cp.async, two chunks ahead
// like the rows.
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

  template <class Tma, class Boxes>
  static CUTE_DEVICE void issue_box(const Tma& tma, const Boxes& b, int j, int s, uint64_t& bar) {
    issue_rows_box(tma, b, j, s * int(sizeof(typename T::Stage) / sizeof(Element)), bar);
  }

  template <class Boxes>
  CUTE_DEVICE void load_chunk(const PiecesDK& dk, const PiecesBV& bv, const Boxes& boxes, int i) {
    auto& sm = smem();
    const int s = i % T::kStages, j = chunk_of(i), valid = it.valid_rows(j);
    auto& st = sm.stage[s];
    if (a.vec16) {
      if (tid == 0) {
        uint64_t& bar = reinterpret_cast<uint64_t&>(sm.rows_landed[s]);
        cutlass::arch::fence_view_async_shared();  // this stage's earlier generic reads and writes first
        sm.rows_landed[s].arrive_and_expect_tx(T::kTmaBytes);
        issue_box(p.tma_q, get<0>(boxes), j, s, bar);
        issue_box(p.tma_k, get<1>(boxes), j, s, bar);
        issue_box(p.tma_w, get<2>(boxes), j, s, bar);
        issue_box(p.tma_do, get<3>(boxes), j, s, bar);
        issue_box(p.tma_dv, get<4>(boxes), j, s, bar);
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

  // Rows of step i's stage at or past the sequence end to zero (this thread's pieces).
  CUTE_DEVICE void zero_rows_past_end(const PiecesDK& dk, const PiecesBV& bv, int i) {
    auto& st = smem().stage[i % T::kStages];
    auto at = [](const auto* x) { return cute::cast_smem_ptr_to_uint(x); };
    const int valid = it.valid_rows(chunk_of(i));
    dk.zero_from(at(st.q.data()), valid);
    dk.zero_from(at(st.k.data()), valid);
    dk.zero_from(at(st.w.data()), valid);
    bv.zero_from(at(st.dout.data()), valid);
    bv.zero_from(at(st.dv.data()), valid);
  }

  // Step i's row factors and decays, then do <- diag(fq) do (this thread's pieces).
  CUTE_DEVICE void fold_gates(const PiecesBV& bv, int i) {
    auto& sm = smem();
    const int s = i % T::kStages, valid = it.valid_rows(chunk_of(i));
    const bool scalar = a.gate && !a.per_key_gate;
    // Thread tid converts its own slot decay[tid]: G of row tid (scalar gate) or G_last of key tid.
    const float mine = a.gate && tid < kDK ? sm.decay[s][tid] * a.gate_log2 : 0.f;
    const float last = scalar ? sm.gate_last[s] * a.gate_log2 : mine;
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
  // Step i + 3's rows go into the same stage: they are issued as soon as every loader thread holds
  // its pieces of step i's outputs in registers, before the stores.
  template <class Boxes>
  CUTE_DEVICE void store_outputs(const PiecesDK& dk, const PiecesBV& bv, const PiecesDh& dhp, const Boxes& boxes, int i) {
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
    if (i + 3 < it.nchunks) {
      sync();  // every loader thread's reads of the stage are done
      load_chunk(dk, bv, boxes, i + 3);
    }

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
    const auto boxes = cute::make_tuple(  // row_tma.cuh
        rows_boxes<typename T::LayoutRowsDK>(p.tma_q, p.shape_qk, it, it.h, 0, sm.stage[0].q.data()),
        rows_boxes<typename T::LayoutRowsDK>(p.tma_k, p.shape_qk, it, it.h, 0, sm.stage[0].k.data()),
        rows_boxes<typename T::LayoutRowsDK>(p.tma_w, p.shape_w, it, it.hv, 0, sm.stage[0].w.data()),
        rows_boxes<typename T::LayoutRowsBV>(p.tma_do, p.shape_v, it, it.hv, it.vb, sm.stage[0].dout.data()),
        rows_boxes<typename T::LayoutRowsBV>(p.tma_dv, p.shape_v, it, it.hv, it.vb, sm.stage[0].dv.data()));
    load_chunk(dk, bv, boxes, 0);  // n >= 1 here
    cp_async_commit();
    if (n > 1) load_chunk(dk, bv, boxes, 1);
    cp_async_commit();
    if (n > 2) load_chunk(dk, bv, boxes, 2);
    cp_async_commit();
    // cp.async group g holds step g's copies: the prologue's three, then step i + 2's, committed in
    // step i >= 1 (empty past the end).
    for (int i = 0; i < n; ++i) {
      const int s = i % T::kStages;
      if (i == 0) cp_async_wait<2>();  // step 0's copies landed (steps 1, 2 may be in flight)
      else cp_async_wait<1>();         // step i's (step i + 1 may be in flight)
      if (a.vec16) sm.rows_landed[s].wait((i / T::kStages) % 2);
      sync();  // everyone's copies (the gates of every row)
      // A sequence's last chunk (step 0): rows past its end to zero. fold_gates then reads only this
      // thread's own pieces of do, and the state warpgroup waits for kFull.
      if (a.vec16 && it.valid_rows(chunk_of(i)) < kC) zero_rows_past_end(dk, bv, i);
      fold_gates(bv, i);
      cutlass::arch::fence_view_async_shared();  // the state warpgroup's WGMMAs read these rows
      ChunkBarriers::arrive(ChunkBarriers::kFull + s, 256);
      if (i >= 1) {  // step i - 1's outputs out, step i + 2 into its stage
        store_outputs(dk, bv, dhp, boxes, i - 1);
        cp_async_commit();
      }
    }
    store_outputs(dk, bv, dhp, boxes, n - 1);
  }
};

}  // namespace attnkit::cuda::gdn
