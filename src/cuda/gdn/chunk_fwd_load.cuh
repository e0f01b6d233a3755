// src/cuda/gdn/chunk_fwd_load.cuh — warpgroup 0 of the recurrence kernel: streams each chunk's
// rows of Q, K (the head's), w, u (this CTA's value columns) and gamma into the chunk's stage,
// works out the state warpgroup's per-row factors (gates, and the in-op l2norm's inverse norms of
// Q and K: the rows themselves stay as loaded; chunk_gate_factors), hands the stage to the state
// warpgroup and, once that is done with it, writes the chunk's output rows (left in u's buffer)
// to `o`.
//
// Chunk j's copies are issued two chunks ahead, so they land while chunks j-1 and j-2 compute: by
// TMA (one thread, row_tma.cuh) when every row start is 16-byte aligned, else by cp.async
// (zero-filled past the sequence end). A TMA box reads on past a sequence's end into the next
// sequence's rows: those rows are zeroed where they land, before the state warpgroup sees the
// stage, so the state warpgroup always gets zeros there (a NaN in one sequence never reaches
// another's results, as it would through a mere factor of 0). Gamma comes by cp.async; rows past
// the end read gamma_last (the last valid row's), so the state warpgroup can take gamma[C - 1] as
// the chunk's total decay.
#pragma once
#include <cutlass/arch/barrier.h>

#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"
#include "src/cuda/gdn/row_tma.cuh"

namespace attnkit::cuda::gdn {

// The state warpgroup's per-row factors of chunk j (chunk_fwd_traits.cuh, SharedStorage::gate),
// once per row instead of once per element it holds, by the 128 threads of the warpgroup that
// hands the stage over (the loader; with kWu the w / u warpgroup, whose GEMMs run meanwhile).
// With the in-op l2norm, the rows' inverse norms go into the factors rather than into the rows:
// thread r < 64 takes Q's row r (its factors 0 and 2), thread 64 + r K's row r (1 and 3). A
// training forward keeping T (a.rstd_q) also writes them out (`out`, NormsOut): 4 bytes a row, where
// normalised 16-byte rows written here paced the chain (docs/perf/gdn_chunk_bwd.md).
struct NormsOut {
  float* row = nullptr;   // chunk 0's row of this thread's rstd_q (thread r < C) or rstd_k; null: none
  int64_t chunk_step = 0;  // elements from a chunk's row to the next chunk's
  // Written from the first value block of each qk head's first value head. Worked out once an item,
  // so that a chunk pays a compare and a store (the per-chunk test and row address read 248 -> 257
  // us of the forward recurrence at B4).
  template <int kC>
  static CUTE_DEVICE NormsOut of(const ChunkFwdArgs& a, const WorkItem& it, int tid) {
    NormsOut o;
    if (a.rstd_q.ptr && it.vb == 0 && (a.HV == a.H || it.hv % (a.HV / a.H) == 0)) {
      const RowTensor& rstd = tid < kC ? a.rstd_q : a.rstd_k;
      o.row = static_cast<float*>(rstd.ptr) + it.row(rstd, tid % kC, it.h);
      o.chunk_step = int64_t(kC) * rstd.st;
    }
    return o;
  }
};
template <class T, Recurrence kMode>
CUTE_DEVICE void chunk_gate_factors(const ChunkFwdArgs& a, const WorkItem& it, int tid, int j, const NormsOut& out = {}) {
  constexpr int kC = T::kC, kDK = T::kDK;
  auto& sm = chunk_smem<typename T::SharedStorage>();
  const int s = j % T::kStages, r = tid % kC;
  const bool q_row = tid < kC;
  float norm = 1.f;
  if (a.l2norm && (q_row ? writes_output(kMode) : true)) {
    Tensor sRows = make_tensor(make_smem_ptr(q_row ? sm.stage[s].q.data() : sm.stage[s].k.data()), typename T::LayoutRowsDK{});
    norm = l2_inverse_norm<kDK, 1>(sRows, r, 0);
    if constexpr (writes_output(kMode))
      if (out.row && r < it.valid_rows(j)) out.row[j * out.chunk_step] = norm;
  }
  const float gamma = sm.gamma[s][r];
  if (q_row) {
    sm.gate[s][0][r] = a.scale * norm * ex2(gamma);
    sm.gate[s][2][r] = a.scale * norm;
  } else {  // D's factor 0 past the sequence end (the rows there are zeros)
    sm.gate[s][1][r] = r < it.valid_rows(j) ? norm * ex2(sm.gamma[s][kC - 1] - gamma) : 0.f;
    sm.gate[s][3][r] = norm;
  }
}

// Without output (kStates): no Q to load; what the backward keeps (v_new, the next start state)
// goes out from the stage where o's rows would. kWu: w's buffer takes [Tu | Tw] rows
// and u's this CTA's columns of V (the TMA descriptors point there), for the w / u warpgroup
// (chunk_fwd_wu.cuh), which gets the stage's rows ("landed"), works out the row factors and hands
// the stage to the state warpgroup itself ("full"); always TMA.
// kFromT (with kWu and kStates: the backward's rerun from the forward's kept T): w's buffer takes
// T's [C, C] rows (its first half) instead of [Tu | Tw], no gamma is loaded (the w / u warpgroup
// forms it from g), and the w the w / u warpgroup formed goes out with the kept tiles (vb == 0).
template <class T, Recurrence kMode, bool kWu = false, bool kFromT = false>
struct LoadWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  const ChunkFwdParams<T>& p;
  const ChunkFwdArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  static CUTE_DEVICE void sync() { ChunkBarriers::sync(ChunkBarriers::kLoad, 128); }

  using PiecesDK = ChunkPieces<kDK, typename T::LayoutRowsDK>;  // Q, K, w (cp.async path)
  using PiecesBV = ChunkPieces<kBV, typename T::LayoutRowsBV>;  // u
  static constexpr uint32_t kUBytes = kC * kBV * sizeof(Element);
  static constexpr uint32_t kTmaBytes = kFromT ? (kC * kDK + kC * kC) * sizeof(Element) + kUBytes  // K, T, u
                                               : (writes_output(kMode) ? 3 : 2) * kC * kDK * sizeof(Element) + kUBytes;  // Q (with output), K, w, u
  using PiecesCC = ChunkPieces<kC, typename T::LayoutCC>;  // T's rows (kFromT)

  // The sequence split's virtual block (chunk_fwd_split.cuh): u = 0, never loaded; its stages'
  // u tiles are zeroed once (without output nothing else writes there).
  CUTE_DEVICE bool virtual_block() const {
    if constexpr (kMode == Recurrence::kEnd) return it.vb >= a.v_blocks;
    else return false;
  }

  template <class Boxes, class TBox>
  CUTE_DEVICE void load_chunk(const PiecesDK& dk, const PiecesBV& bv, const Boxes& boxes, const TBox& t_box, int j) {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    const int s = j % T::kStages;
    auto& st = sm.stage[s];
    const int valid = it.valid_rows(j);
    if (kWu || a.vec16) {
      if (tid == 0) {
        constexpr int kStageElems = sizeof(typename T::Stage) / sizeof(Element);
        uint64_t& bar = reinterpret_cast<uint64_t&>(sm.rows_landed[s]);
        // kStates: this stage's kept tiles went out by TMA (store_kept_tma) just before: their
        // shared reads come first.
        if constexpr (kMode == Recurrence::kStates) tma_store_wait<0>();
        cutlass::arch::fence_view_async_shared();  // this stage's earlier generic reads first
        sm.rows_landed[s].arrive_and_expect_tx(virtual_block() ? kTmaBytes - kUBytes : kTmaBytes);
        if constexpr (writes_output(kMode)) issue_rows_box(p.tma_q, get<0>(boxes), j, s * kStageElems, bar);
        issue_rows_box(p.tma_k, get<1>(boxes), j, s * kStageElems, bar);
        if constexpr (kFromT) issue_rows_box(p.tma_t, t_box, j, s * kStageElems, bar);
        else issue_rows_box(p.tma_w, get<2>(boxes), j, s * kStageElems, bar);
        // u's buffer held the previous chunk's output: its TMA store (store_output) must have read
        // it first; the other three boxes go out before that wait.
        if constexpr (writes_output(kMode)) tma_store_wait<0>();
        if (!virtual_block()) issue_rows_box(p.tma_u, get<3>(boxes), j, s * kStageElems, bar);
      }
    } else if constexpr (!kWu) {
      auto at = [](const auto* x) { return cute::cast_smem_ptr_to_uint(x); };
      if constexpr (writes_output(kMode)) dk.copy(at(st.q.data()), static_cast<const Element*>(a.q.ptr), a.q, it, it.h, j, valid, false);
      dk.copy(at(st.k.data()), static_cast<const Element*>(a.k.ptr), a.k, it, it.h, j, valid, false);
      dk.copy(at(st.w.data()), static_cast<const Element*>(a.w.ptr), a.w, it, it.hv, j, valid, true);
      if (!virtual_block()) bv.copy(at(st.u.data()), static_cast<const Element*>(a.u.ptr) + it.vb * kBV, a.u, it, it.hv, j, valid, true);
    }
    if (!kFromT && tid < kC) {
      const int r = min(tid, valid - 1);
      copy4_async(&sm.gamma[s][tid], static_cast<const float*>(a.gamma.ptr) + it.row(a.gamma, int64_t(j) * kC + r, it.hv));
    }
  }

  // Rows of chunk j's stage at or past the sequence end to zero (this thread's pieces).
  CUTE_DEVICE void zero_rows_past_end(const PiecesDK& dk, const PiecesBV& bv, int j) {
    auto& st = chunk_smem<typename T::SharedStorage>().stage[j % T::kStages];
    auto at = [](const auto* x) { return cute::cast_smem_ptr_to_uint(x); };
    const int valid = it.valid_rows(j);
    if constexpr (writes_output(kMode)) dk.zero_from(at(st.q.data()), valid);
    dk.zero_from(at(st.k.data()), valid);
    if constexpr (kFromT) PiecesCC(tid, st.w.data()).zero_from(at(st.w.data()), valid);
    else dk.zero_from(at(st.w.data()), valid);
    bv.zero_from(at(st.u.data()), valid);
  }

  // Once the state warpgroup is done with chunk j: its output rows, from u's buffer, to o. A
  // whole chunk with TMA rows goes by one TMA store from thread 0 (load_chunk's TMA into the
  // stage then waits for it to have read the tile); a tail chunk row by row by every thread (a
  // box would write into the next sequence's rows).
  // What the backward keeps (store_kept): the chunk's v_new and the next chunk's start state, which
  // the state warpgroup left in u's and Q's buffers (kStates, the rerun) or in sm.vnew / sm.h
  // (kOutputAndStates, then "kept free" back to the state warpgroup).
  // Returns whether this warpgroup's threads read the tile (the generic path): then they must
  // all be done before the stage is refilled.
  CUTE_DEVICE bool store_output(int j) {
    const int s = j % T::kStages;
    ChunkBarriers::sync(ChunkBarriers::kEmpty + s, 256);
    auto& sm = chunk_smem<typename T::SharedStorage>();
    if constexpr (kMode == Recurrence::kStates) {  // the state warpgroup left v_new and the next start state here
      if (kWu || a.vec16) return store_kept_tma(j);
      Tensor sVn = make_tensor(make_smem_ptr(sm.stage[s].u.data()), typename T::LayoutRowsBV{});  // [C, BV]
      Tensor sH = make_tensor(make_smem_ptr(sm.stage[s].q.data()), typename T::LayoutH{});       // [DK, BV]
      store_kept<T>(a, it, tid, sVn, sH, j + 1);
      if constexpr (kFromT) {  // the w the w / u warpgroup formed, for bwd_dhu (one value block writes it)
        if (it.vb == 0) {
          Tensor sW = make_tensor(make_smem_ptr(sm.stage[s].w.data()), typename T::LayoutRowsDK{});  // [C, DK]
          store_chunk_rows<kDK>(sW, static_cast<Element*>(a.w.ptr), a.w, it, int64_t(j) * kC, it.hv, it.valid_rows(j), true);
        }
      }
      return true;
    }
    if constexpr (!writes_output(kMode)) return false;
    const bool read_stage = store_o(j);
    if constexpr (kMode == Recurrence::kOutputAndStates) {  // sm.vnew[j % 2], sm.h: chunk_fwd_state.cuh
      Tensor sVn = make_tensor(make_smem_ptr(sm.vnew[j % 2].data()), typename T::LayoutRowsBV{});  // [C, BV]
      Tensor sH = make_tensor(make_smem_ptr(sm.h.data()), typename T::LayoutH{});                 // [DK, BV]
      store_kept<T>(a, it, tid, sVn, sH, j + 1);
      if (j + 2 < it.nchunks) ChunkBarriers::arrive(ChunkBarriers::kKeptFree, 256);
    }
    return read_stage;
  }

  // kStates with TMA rows: chunk j's v_new, chunk j + 1's start state and (kFromT, vb 0) chunk j's
  // w, from stage s, by TMA stores from thread 0 (store_kept's thread stores held the loader's 128
  // threads on every chunk: the wu kernel's kStates pass took ~37% longer than its kOutput pass for
  // ~12% more bytes, ncu). A tail chunk's v_new and w rows go row by row (a box would write into
  // the next sequence's rows); the state, a whole [DK, BV] box, always by TMA. load_chunk waits for
  // the stores' shared reads before refilling the stage. Returns whether this thread read the tiles.
  CUTE_DEVICE bool store_kept_tma(int j) {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    constexpr int kStageElems = sizeof(typename T::Stage) / sizeof(Element);
    const int s = j % T::kStages;
    const int valid = it.valid_rows(j);
    bool read = false;
    if (valid == kC) {
      if (tid == 0) {
        const auto box = rows_boxes<typename T::LayoutRowsBV>(p.tma_vnew, p.shape_u, it, it.hv, it.vb, sm.stage[0].u.data());
        copy(p.tma_vnew, make_tensor(get<1>(box).data() + s * kStageElems, get<1>(box).layout()), get<0>(box)(_, j));
      }
    } else {
      Tensor sVn = make_tensor(make_smem_ptr(sm.stage[s].u.data()), typename T::LayoutRowsBV{});  // [C, BV]
      store_chunk_rows<kBV>(sVn, static_cast<Element*>(a.vnew.ptr) + it.vb * kBV, a.vnew, it, int64_t(j) * kC, it.hv, valid, true);
      read = true;
    }
    if (j + 1 < it.nchunks && tid == 0) {  // the start state of chunk j + 1: slot as store_kept numbers it
      const int64_t chunk = int64_t(it.seg) * a.split.chunks + j + 1;
      const auto box =
          matrix_boxes<typename T::LayoutH>(p.tma_states, p.shape_states, it.hv, ChunkSlot::first(a, it) + chunk, sm.stage[0].q.data());
      copy(p.tma_states, make_tensor(get<1>(box).data() + s * kStageElems, get<1>(box).layout()), get<0>(box)(_, it.vb));
    }
    if constexpr (kFromT) {  // the w the w / u warpgroup formed, for bwd_dhu (one value block writes it)
      if (it.vb == 0) {
        if (valid == kC) {
          if (tid == 0) {
            const auto box = rows_boxes<typename T::LayoutRowsDK>(p.tma_w_out, p.shape_w, it, it.hv, 0, sm.stage[0].w.data());
            copy(p.tma_w_out, make_tensor(get<1>(box).data() + s * kStageElems, get<1>(box).layout()), get<0>(box)(_, j));
          }
        } else {
          Tensor sW = make_tensor(make_smem_ptr(sm.stage[s].w.data()), typename T::LayoutRowsDK{});  // [C, DK]
          store_chunk_rows<kDK>(sW, static_cast<Element*>(a.w.ptr), a.w, it, int64_t(j) * kC, it.hv, valid, true);
          read = true;
        }
      }
    }
    if (tid == 0) tma_store_arrive();
    return read;
  }

  // Chunk j's output rows, from u's buffer, to o (store_output's); whether this thread read them.
  CUTE_DEVICE bool store_o(int j) {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    const int s = j % T::kStages;
    const int valid = it.valid_rows(j);
    if ((kWu || a.vec16) && a.o_vec16 && valid == kC) {
      if (tid == 0) {
        constexpr int kStageElems = sizeof(typename T::Stage) / sizeof(Element);
        const auto box = rows_boxes<typename T::LayoutRowsBV>(p.tma_o, p.shape_u, it, it.hv, it.vb, sm.stage[0].u.data());
        copy(p.tma_o, make_tensor(get<1>(box).data() + s * kStageElems, get<1>(box).layout()), get<0>(box)(_, j));
        tma_store_arrive();
      }
      return false;
    }
    Tensor sO = make_tensor(make_smem_ptr(sm.stage[s].u.data()), typename T::LayoutRowsBV{});  // [C, BV]
    store_chunk_rows<kBV>(sO, static_cast<Element*>(a.o.ptr) + it.vb * kBV, a.o, it, int64_t(j) * kC, it.hv, valid, a.o_vec16);
    return true;
  }

  CUTE_DEVICE void run() {
    const int n = it.nchunks;
    auto& sm = chunk_smem<typename T::SharedStorage>();
    if (tid == 0) {
      CUTE_UNROLL
      for (int s = 0; s < T::kStages; ++s) sm.rows_landed[s].init(1);
      cutlass::arch::fence_barrier_init();
    }
    sync();
    const PiecesDK dk(tid, sm.stage[0].q.data());
    const PiecesBV bv(tid, sm.stage[0].u.data());
    if (virtual_block()) {
      CUTE_UNROLL
      for (int s = 0; s < T::kStages; ++s) bv.zero_from(cute::cast_smem_ptr_to_uint(sm.stage[s].u.data()), 0);
    }
    const auto boxes = cute::make_tuple(  // row_tma.cuh (used when a.vec16)
        rows_boxes<typename T::LayoutRowsDK>(p.tma_q, p.shape_qk, it, it.h, 0, sm.stage[0].q.data()),
        rows_boxes<typename T::LayoutRowsDK>(p.tma_k, p.shape_qk, it, it.h, 0, sm.stage[0].k.data()),
        rows_boxes<typename T::LayoutRowsDK>(p.tma_w, p.shape_w, it, it.hv, 0, sm.stage[0].w.data()),
        rows_boxes<typename T::LayoutRowsBV>(p.tma_u, p.shape_u, it, it.hv, it.vb, sm.stage[0].u.data()));
    const auto t_box = [&] {  // T's rows into w's buffer (kFromT)
      if constexpr (kFromT) return rows_boxes<typename T::LayoutCC>(p.tma_t, p.shape_t, it, it.hv, 0, sm.stage[0].w.data());
      else return 0;
    }();
    const NormsOut norms_out = kWu ? NormsOut{} : NormsOut::of<kC>(a, it, tid);  // kWu: the w / u warpgroup's
    load_chunk(dk, bv, boxes, t_box, 0);  // n >= 1 here
    cp_async_commit();
    if (n > 1) load_chunk(dk, bv, boxes, t_box, 1);
    cp_async_commit();
    for (int j = 0; j < n; ++j) {
      const int s = j % T::kStages;
      cp_async_wait<1>();  // this thread's copies of chunk j landed (j + 1 may be in flight)
      if (kWu || a.vec16) sm.rows_landed[s].wait((j / T::kStages) % 2);
      sync();              // everyone's: a thread reads rows and gates that others copied
      if ((kWu || a.vec16) && it.valid_rows(j) < kC) {  // a sequence's last chunk: the boxes read on past its end
        zero_rows_past_end(dk, bv, j);
        sync();  // chunk_gate_factors (here or on the w / u warpgroup) reads whole rows
      }
      cutlass::arch::fence_view_async_shared();  // the zeroed rows, before the WGMMAs read them
      if constexpr (kWu) {
        ChunkBarriers::arrive(ChunkBarriers::kLanded + s, 256);  // the w / u warpgroup takes it from here
      } else {
        chunk_gate_factors<T, kMode>(a, it, tid, j, norms_out);
        ChunkBarriers::arrive(ChunkBarriers::kFull + s, 256);
      }

      // Chunk j + 2 goes where chunk j - 1 was, once that chunk's output is out.
      const bool read_output = j >= 1 && store_output(j - 1);
      if (j + 2 < n) {
        if (read_output) sync();  // every thread's read of chunk j - 1's output is done
        load_chunk(dk, bv, boxes, t_box, j + 2);
      }
      cp_async_commit();
    }
    store_output(n - 1);
    if (tid == 0) tma_store_wait<0>();  // the tile stays readable until the store has read it
  }
};

}  // namespace attnkit::cuda::gdn
