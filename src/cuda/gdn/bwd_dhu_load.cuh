// src/cuda/gdn/bwd_dhu_load.cuh — warpgroup 0 of the bwd_dhu kernel: stages each chunk's rows of
// Q, K (the head's), w (the value head's), do and dv (this CTA's value columns), from the last
// chunk to the first, with the gates' row factors (bwd_dhu_traits.cuh):
//   fq_r = scale e^G_r, fk_r = e^(G_last - G_r) for rows r < valid, 0 past the sequence end
//   (with the op's l2norm on raw rows, times row r's inverse norms rstd_q, rstd_k);
//   decay[d] = e^G_last[d];   do <- diag(fq) do in place
// and, once the state warpgroup is done with a chunk, writes its dv2 rows (left in dv's buffer)
// and its dh tile out.
//
// Two halves of 64 threads, each a pipeline of its own, because the state warpgroup waited for
// one warpgroup doing both in turn (a third of its time, docs/perf/gdn_bwd_dhu.md):
//   the gate half (warps 0, 1): step i's gates landed -> fold them -> "full" -> once the state
//     is done with step i - 1, step i + 2's gates into that stage (cp.async);
//   the output half (warps 2, 3): once the state is done with step i, its dv2 rows and dh tile
//     out, and step i + 3's rows into the stage (TMA: one thread, five boxes on the stage's
//     transaction barrier, when every row start is 16-byte aligned; else cp.async, zero-filled
//     past the sequence end, then a "rows copied" barrier to the gate half).
// With the sequence split's first pass (bwd_dhu_split.cuh) nothing is written out: the output half
// keeps its barriers and refills, and stores neither dv2 nor dh. A virtual block's do / dv boxes
// lie past V: TMA fills them with zeros and counts their bytes as any box's.
// A TMA box reads on past a sequence's end into the next sequence's rows: the gate half zeroes
// those rows where they land, so the state warpgroup gets zeros past the end either way (fq = 0
// there too, which alone would not keep a NaN out: 0 * NaN = NaN).
#pragma once
#include <cutlass/arch/barrier.h>

#include "src/cuda/gdn/bwd_dhu_args.cuh"
#include "src/cuda/gdn/bwd_dhu_split.cuh"
#include "src/cuda/gdn/bwd_dhu_traits.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"

namespace attnkit::cuda::gdn {

template <class T>
struct DhuLoadWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  static constexpr int kHalf = 64;  // threads of each half
  using B = DhuBarriers;
  const BwdDhuParams<T>& p;
  const BwdDhuArgs& a;
  const WorkItem& it;
  int tid;  // 0..127: 0..63 the gate half, 64..127 the output half

  using PiecesDK = ChunkPieces<kDK, typename T::LayoutRowsDK, kC, kHalf>;  // Q, K, w
  using PiecesBV = ChunkPieces<kBV, typename T::LayoutRowsBV, kC, kHalf>;  // do, dv, dv2
  using PiecesDh = ChunkPieces<kBV, typename T::LayoutDh, kDK, kHalf>;     // dh (offsets only)

  static CUTE_DEVICE auto& smem() { return chunk_smem<typename T::SharedStorage>(); }
  // Step i of the sequence's walk works on chunk nchunks - 1 - i.
  CUTE_DEVICE int chunk_of(int i) const { return it.nchunks - 1 - i; }
  CUTE_DEVICE int half_tid() const { return tid % kHalf; }

  // ---- the gate half ----

  // Step i's gates into its stage (cp.async): G of row r (clamped to the last valid row) in
  // decay[r] and G_last in gate_last (scalar gate), or G_last of key d in decay[d] (gk).
  CUTE_DEVICE void load_gates(int i) const {
    if (!a.gate) return;
    auto& sm = smem();
    const int s = i % T::kStages, j = chunk_of(i), valid = it.valid_rows(j), t = half_tid();
    const float* g = a.gate + it.b * a.g_sb + (it.t0 + int64_t(j) * kC) * a.g_st + int64_t(it.hv) * a.g_sh;
    const float* last = g + int64_t(valid - 1) * a.g_st;
    if (a.per_key_gate) {
      CUTE_UNROLL
      for (int d = t; d < kDK; d += kHalf) copy4_async(&sm.decay[s][d], last + d);
    } else {
      static_assert(kC == kHalf);
      copy4_async(&sm.decay[s][t], g + int64_t(min(t, valid - 1)) * a.g_st);
      if (t == 0) copy4_async(&sm.gate_last[s], last);
    }
  }

  // Rows of step i's stage at or past the sequence end to zero (this thread's pieces).
  CUTE_DEVICE void zero_rows_past_end(const PiecesDK& dk, const PiecesBV& bv, int i) const {
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
  CUTE_DEVICE void fold_gates(const PiecesBV& bv, int i, float2 norms) const {
    auto& sm = smem();
    const int s = i % T::kStages, valid = it.valid_rows(chunk_of(i)), t = half_tid();
    const bool scalar = a.gate && !a.per_key_gate;
    // Thread t converts the slots it reads: decay[t] (G of row t, scalar gate) and the keys
    // t + 64 m (gk: G_last of each key). Rows and keys are disjoint for t >= 64 only: with a
    // scalar gate, G_r is read into a register before decay[t] is overwritten by this thread.
    const float G = scalar ? sm.decay[s][t] * a.gate_log2 : 0.f;
    const float last = scalar ? sm.gate_last[s] * a.gate_log2 : 0.f;
    const bool live = t < valid;
    sm.fq[s][t] = __float2half_rn(live ? a.scale * ex2(G) * norms.x : 0.f);
    sm.fk[s][t] = __float2half_rn(live ? (scalar ? ex2(last - G) : 1.f) * norms.y : 0.f);  // gk: K comes gated
    CUTE_UNROLL
    for (int d = t; d < kDK; d += kHalf) {
      const float key_last = a.per_key_gate ? sm.decay[s][d] * a.gate_log2 : last;
      sm.decay[s][d] = a.gate ? ex2(key_last) : 1.f;
    }
    ChunkBarriers::sync(B::kGateHalf, kHalf);  // every row's fq
    // kLocal: the local warpgroup's dv product reads do as it came (and zeroed past the end).
    if constexpr (T::kLocal) ChunkBarriers::sync(B::kDoRead + s, B::kDoReadThreads);
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

  CUTE_DEVICE void run_gates() const {
    const int n = it.nchunks;
    auto& sm = smem();
    const PiecesDK dk(half_tid(), sm.stage[0].q.data());
    const PiecesBV bv(half_tid(), sm.stage[0].dout.data());
    // cp.async group g holds step g's gates: the prologue's three, then step i + 2's, committed
    // in step i >= 1 (empty past the end).
    for (int i = 0; i < T::kStages; ++i) {
      if (i < n) load_gates(i);
      cp_async_commit();
    }
    // Row half_tid()'s inverse norms (DhuRowNorms): plain loads two steps ahead into registers, as
    // no shared memory is left at DK = 128, BV = 64. Each is issued at the top of a step and moved
    // into the loop's carried registers at its end: issued at the end (three steps ahead), the move
    // at the next step's top waited for it (ncu at varlen: 2% of bwd_dhu's stall samples).
    DhuRowNorms row_norms(a, it, half_tid());
    float2 norms = row_norms.next(), next_norms = row_norms.next();  // steps i, i + 1
    for (int i = 0; i < n; ++i) {
      const float2 after_norms = row_norms.next();  // step i + 2's
      const int s = i % T::kStages;
      if (i == 0) cp_async_wait<2>();  // step 0's gates landed (steps 1, 2 may be in flight)
      else cp_async_wait<1>();         // step i's (step i + 1 may be in flight)
      if (a.vec16) sm.rows_landed[s].wait((i / T::kStages) % 2);
      else ChunkBarriers::sync(B::kRowsCopied + s, 2 * kHalf);
      ChunkBarriers::sync(B::kGateHalf, kHalf);  // every gate of the step
      // A sequence's last chunk (step 0): rows past its end to zero. fold_gates then reads only this
      // thread's own pieces of do, and the state warpgroup waits for kFull. (kLocal: the local
      // warpgroup zeroes them, before its products.)
      if (!T::kLocal && a.vec16 && it.valid_rows(chunk_of(i)) < kC) zero_rows_past_end(dk, bv, i);
      fold_gates(bv, i, norms);
      cutlass::arch::fence_view_async_shared();  // the state warpgroup's WGMMAs read these rows
      ChunkBarriers::arrive(B::kFull + s, T::kFullThreads);
      if (i >= 1) {  // the state is done with step i - 1: step i + 2's gates into its stage
        ChunkBarriers::sync_unaligned(B::kEmpty + (i - 1) % T::kStages, B::kEmptyThreads);
        if (i + 2 < n) load_gates(i + 2);
        cp_async_commit();
      }
      norms = next_norms;
      next_norms = after_norms;
    }
    ChunkBarriers::sync_unaligned(B::kEmpty + (n - 1) % T::kStages, B::kEmptyThreads);
  }

  // ---- the output half ----

  template <class Tma, class Boxes>
  static CUTE_DEVICE void issue_box(const Tma& tma, const Boxes& b, int j, int s, uint64_t& bar) {
    issue_rows_box(tma, b, j, s * int(sizeof(typename T::Stage) / sizeof(Element)), bar);
  }

  // Step i's rows into its stage: TMA boxes, or cp.async copies waited for here and announced to
  // the gate half (the unaligned path: slower, and rare).
  template <class Boxes>
  CUTE_DEVICE void load_rows(const PiecesDK& dk, const PiecesBV& bv, const Boxes& boxes, int i) const {
    auto& sm = smem();
    const int s = i % T::kStages, j = chunk_of(i), valid = it.valid_rows(j);
    auto& st = sm.stage[s];
    if (a.vec16) {
      // Two issuing threads, one in each warp of the half (each box's coordinates are a serial chain
      // of uniform instructions). Thread 0's arrival posts the stage's whole byte count: the phase
      // needs that arrival, so bytes of thread 32's boxes landing first only take the transaction
      // count below zero for a while.
      uint64_t& bar = reinterpret_cast<uint64_t&>(sm.rows_landed[s]);
      if (half_tid() == 0) {
        cutlass::arch::fence_view_async_shared();  // this stage's earlier generic reads and writes first
        sm.rows_landed[s].arrive_and_expect_tx(T::kTmaBytes);
        issue_box(p.tma_q, get<0>(boxes), j, s, bar);
        issue_box(p.tma_k, get<1>(boxes), j, s, bar);
      } else if (half_tid() == 32) {
        cutlass::arch::fence_view_async_shared();
        issue_box(p.tma_w, get<2>(boxes), j, s, bar);
        issue_box(p.tma_do, get<3>(boxes), j, s, bar);
        if constexpr (!T::kLocal) issue_box(p.tma_dv, get<4>(boxes), j, s, bar);
      }
    } else {
      // Element by element (rows not 16-byte aligned), one tensor at a time: __syncwarp keeps the
      // compiler from hoisting every tensor's loads together (ptxas spilled at DK = 64, BV = 64).
      auto at = [](const auto* x) { return cute::cast_smem_ptr_to_uint(x); };
      dk.copy(at(st.q.data()), static_cast<const Element*>(a.q.ptr), a.q, it, it.h, j, valid, false);
      __syncwarp();
      dk.copy(at(st.k.data()), static_cast<const Element*>(a.k.ptr), a.k, it, it.h, j, valid, false);
      __syncwarp();
      dk.copy(at(st.w.data()), static_cast<const Element*>(a.w.ptr), a.w, it, it.hv, j, valid, false);
      __syncwarp();
      const int64_t v0 = int64_t(it.vb) * kBV;
      bv.copy(at(st.dout.data()), static_cast<const Element*>(a.dout.ptr) + v0, a.dout, it, it.hv, j, valid, false);
      __syncwarp();
      bv.copy(at(st.dv.data()), static_cast<const Element*>(a.dv.ptr) + v0, a.dv, it, it.hv, j, valid, false);
      ChunkBarriers::arrive(B::kRowsCopied + s, 2 * kHalf);
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

  // Step i's dh tile [DK, BV] (dh[i % 2], published by the state warpgroup and fenced for the
  // async proxy) to dh[chunk] by one TMA store (thread 0 of the half; dh_vec16).
  CUTE_DEVICE void issue_dh_store(int i) const {
    const int chunk = int((a.chunk_offsets ? a.chunk_offsets[it.n] : 0) + dhu_first_chunk(a, it) + chunk_of(i));
    Tensor mdh = p.tma_dh.get_tma_tensor(p.shape_dh);  // (k, v, chunk, value head, batch)
    Tensor gdh = local_tile(mdh(_, _, chunk, it.hv, int(it.b)), Shape<Int<kDK>, Int<kBV>>{}, make_coord(0, it.vb));
    Tensor sdh = make_tensor(make_smem_ptr(smem().dh[i % 2].data()), typename T::LayoutDh{});
    auto part = tma_partition(p.tma_dh, _0{}, Layout<_1>{}, group_modes<0, 2>(sdh), group_modes<0, 2>(gdh));
    copy(p.tma_dh, get<1>(part), get<0>(part));
    tma_store_arrive();
  }

  // Step i's dh tile by 16-byte pieces of every thread of the half (dh not TMA-able: unaligned,
  // or the value-first layout).
  CUTE_DEVICE void store_dh_pieces(int i) const {
    const PiecesDh dhp(half_tid(), smem().dh[0].data());  // worked out here: off the TMA path's registers
    const uint32_t dh_tile = cute::cast_smem_ptr_to_uint(smem().dh[i % 2].data());
    const int64_t chunk = (a.chunk_offsets ? a.chunk_offsets[it.n] : 0) + dhu_first_chunk(a, it) + chunk_of(i);
    Element* dh = static_cast<Element*>(a.dh) + it.b * a.dh_sb + chunk * a.dh_sc + int64_t(it.hv) * a.dh_sh +
                  (int64_t(it.vb) * kBV + dhp.c) * a.dh_sv + int64_t(dhp.r) * a.dh_sk;
    constexpr int kBatch = PiecesDh::kPieces < 4 ? PiecesDh::kPieces : 4;  // pieces in registers at a time (the rare path)
    static_assert(PiecesDh::kPieces % kBatch == 0);
    CUTE_UNROLL
    for (int p0 = 0; p0 < PiecesDh::kPieces; p0 += kBatch) {
      uint4 tile[kBatch];
      CUTE_UNROLL
      for (int p = 0; p < kBatch; ++p) tile[p] = ld_shared_v4(dh_tile + dhp.offset[p0 + p]);
      CUTE_UNROLL
      for (int p = 0; p < kBatch; ++p) store8(dh + int64_t(p0 + p) * PiecesDh::kStep * a.dh_sk, tile[p], false, a.dh_sv);
    }
  }

  // Once the state warpgroup is done with step i: the chunk's dh tile and dv2 rows out. Step
  // i + 3's rows go into the same stage as soon as every thread of the half holds its pieces of
  // dv2 in registers, before the stores.
  template <class Boxes>
  CUTE_DEVICE void store_outputs(const PiecesDK& dk, const PiecesBV& bv, const Boxes& boxes, int i) const {
    const int s = i % T::kStages, j = chunk_of(i), valid = it.valid_rows(j);
    ChunkBarriers::sync_unaligned(B::kEmpty + s, B::kEmptyThreads);
    const bool writes = a.split.pass != SegmentSplit::kEnds;
    const bool dh_tma = a.dh_vec16, leader = half_tid() == 0;
    if (writes && dh_tma && leader) issue_dh_store(i);
    const uint32_t dv2_tile = cute::cast_smem_ptr_to_uint(smem().stage[s].dv.data());
    uint4 rows[PiecesBV::kPieces];
    if (writes) {
      CUTE_UNROLL
      for (int p = 0; p < PiecesBV::kPieces; ++p) rows[p] = ld_shared_v4(dv2_tile + bv.offset[p]);
    }
    if (i + 3 < it.nchunks) {
      ChunkBarriers::sync(B::kOutputHalf, kHalf);  // every reader of the stage is done
      load_rows(dk, bv, boxes, i + 3);
    }
    if (writes) {
      Element* dv2 = static_cast<Element*>(a.dv2.ptr) + int64_t(it.vb) * kBV + bv.c + it.row(a.dv2, int64_t(j) * kC + bv.r, it.hv);
      CUTE_UNROLL
      for (int p = 0; p < PiecesBV::kPieces; ++p)
        if (bv.r + p * PiecesBV::kStep < valid) store8(dv2 + int64_t(p) * PiecesBV::kStep * a.dv2.st, rows[p], a.dv2_vec16, 1);
      if (!dh_tma) store_dh_pieces(i);
    }
    // The state warpgroup refills this dh buffer two steps later (bwd_dhu_state.cuh): it waits
    // for this signal from every step but the last two, whose buffers are never refilled. The
    // leader's arrival comes after the TMA store has read the tile (and before the CTA exits).
    if (writes && dh_tma && leader) tma_store_wait<0>();
    if (i + 2 < it.nchunks) ChunkBarriers::arrive(B::kDhFree, B::kDhFreeThreads);
  }

  CUTE_DEVICE void run_outputs() const {
    const int n = it.nchunks;
    auto& sm = smem();
    const PiecesDK dk(half_tid(), sm.stage[0].q.data());
    const PiecesBV bv(half_tid(), sm.stage[0].dout.data());
    const auto boxes = cute::make_tuple(  // row_tma.cuh
        rows_boxes<typename T::LayoutRowsDK>(p.tma_q, p.shape_qk, it, it.h, 0, sm.stage[0].q.data()),
        rows_boxes<typename T::LayoutRowsDK>(p.tma_k, p.shape_qk, it, it.h, 0, sm.stage[0].k.data()),
        rows_boxes<typename T::LayoutRowsDK>(p.tma_w, p.shape_w, it, it.hv, 0, sm.stage[0].w.data()),
        rows_boxes<typename T::LayoutRowsBV>(p.tma_do, p.shape_v, it, it.hv, it.vb, sm.stage[0].dout.data()),
        rows_boxes<typename T::LayoutRowsBV>(p.tma_dv, p.shape_v, it, it.hv, it.vb, sm.stage[0].dv.data()));
    for (int i = 0; i < T::kStages && i < n; ++i) load_rows(dk, bv, boxes, i);
    for (int i = 0; i < n; ++i) store_outputs(dk, bv, boxes, i);
  }

  CUTE_DEVICE void run() const {  // it.nchunks >= 1
    if (tid < kHalf) run_gates();
    else run_outputs();
  }
};

}  // namespace attnkit::cuda::gdn
