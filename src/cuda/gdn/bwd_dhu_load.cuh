// src/cuda/gdn/bwd_dhu_load.cuh — warpgroup 0 of the bwd_dhu kernel: streams each chunk's rows of
// Q, K (the head's), w (the value head's), do and dv (this CTA's value columns) into the chunk's
// stage, from the last chunk to the first, and folds the gates into them in place:
//   Q <- scale * Q * e^G,  K <- K * e^(G_last - G),  w <- -w;  decay[d] = e^G_last
// with G the scalar gate's in-chunk cumulative sum; the per-key gate gk is already in Q and K
// (attnkit/gdn.hpp) and only gives decay[d] = e^gk_last[d]. Once the state warpgroup is done with
// a chunk it writes that chunk's dv2 rows (left in dv's buffer) and its dh tile out.
//
// Copies are issued two chunks ahead (cp.async, zero-filled past the sequence end). Each thread
// folds exactly the 16-byte pieces it copied, so its own cp.async wait is all it needs. Rows past
// the end read G of the last valid row: their factors stay finite on rows of zeros.
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
  const BwdDhuArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  using PiecesDK = ChunkPieces<kDK, typename T::LayoutRowsDK>;  // Q, K, w
  using PiecesBV = ChunkPieces<kBV, typename T::LayoutRowsBV>;  // do, dv

  static CUTE_DEVICE void sync() { ChunkBarriers::sync(ChunkBarriers::kLoad, 128); }
  static CUTE_DEVICE auto& smem() { return chunk_smem<typename T::SharedStorage>(); }
  // Step i of the sequence's walk works on chunk nchunks - 1 - i.
  CUTE_DEVICE int chunk_of(int i) const { return it.nchunks - 1 - i; }

  CUTE_DEVICE void load_chunk(const PiecesDK& dk, const PiecesBV& bv, int i) {
    auto& st = smem().stage[i % T::kStages];
    const int j = chunk_of(i), valid = it.valid_rows(j);
    auto at = [](const auto* p) { return cute::cast_smem_ptr_to_uint(p); };
    dk.copy(at(st.q.data()), static_cast<const Element*>(a.q.ptr), a.q, it, it.h, j, valid, a.vec16);
    dk.copy(at(st.k.data()), static_cast<const Element*>(a.k.ptr), a.k, it, it.h, j, valid, a.vec16);
    dk.copy(at(st.w.data()), static_cast<const Element*>(a.w.ptr), a.w, it, it.hv, j, valid, a.vec16);
    const int64_t v0 = int64_t(it.vb) * kBV;
    bv.copy(at(st.dout.data()), static_cast<const Element*>(a.dout.ptr) + v0, a.dout, it, it.hv, j, valid, a.vec16);
    bv.copy(at(st.dv.data()), static_cast<const Element*>(a.dv.ptr) + v0, a.dv, it, it.hv, j, valid, a.vec16);
  }

  // One 16-byte piece (8 elements) at shared address p: x <- x * f(e).
  template <class F>
  static CUTE_DEVICE void scale_piece(uint32_t p, F&& f) {
    uint4 raw = ld_shared_v4(p);
    auto& x = reinterpret_cast<cutlass::Array<Element, 8>&>(raw);
    CUTE_UNROLL
    for (int e = 0; e < 8; ++e) x[e] = Element(float(x[e]) * f(e));
    st_shared(p, raw);
  }

  // The gates into this thread's pieces of step i's Q, K and w (see the file comment).
  CUTE_DEVICE void fold_gates(const PiecesDK& dk, int i) {
    constexpr float kLog2e = 1.4426950408889634f;
    auto& sm = smem();
    const int s = i % T::kStages, j = chunk_of(i), valid = it.valid_rows(j);
    auto& st = sm.stage[s];
    const uint32_t q0 = cute::cast_smem_ptr_to_uint(st.q.data()), k0 = cute::cast_smem_ptr_to_uint(st.k.data()),
                   w0 = cute::cast_smem_ptr_to_uint(st.w.data());
    CUTE_UNROLL
    for (int p = 0; p < PiecesDK::kPieces; ++p) {  // -w: flip the sign bits
      uint4 raw = ld_shared_v4(w0 + dk.offset[p]);
      raw.x ^= 0x80008000u, raw.y ^= 0x80008000u, raw.z ^= 0x80008000u, raw.w ^= 0x80008000u;
      st_shared(w0 + dk.offset[p], raw);
    }
    const float scale = a.scale;
    const float* g = a.gate ? a.gate + it.b * a.g_sb + (it.t0 + int64_t(j) * kC) * a.g_st + int64_t(it.hv) * a.g_sh : nullptr;
    if (!a.gate || a.per_key_gate) {  // Q <- scale Q; K as given; dH decays by e^gk_last[d] (or not)
      CUTE_UNROLL
      for (int p = 0; p < PiecesDK::kPieces; ++p) scale_piece(q0 + dk.offset[p], [&](int) { return scale; });
      if (dk.r == 0) {
        const float* last = g ? g + int64_t(valid - 1) * a.g_st + dk.c : nullptr;
        CUTE_UNROLL
        for (int e = 0; e < 8; ++e) sm.decay[s][dk.c + e] = last ? ex2(last[e] * kLog2e) : 1.f;
      }
      return;
    }
    // The scalar gate: G of the chunk's row r (clamped to the last valid row), in log2 units.
    auto G = [&](int r) { return g[int64_t(min(r, valid - 1)) * a.g_st] * kLog2e; };
    const float last = G(valid - 1);
    float Gr[PiecesDK::kPieces];
    CUTE_UNROLL
    for (int p = 0; p < PiecesDK::kPieces; ++p) Gr[p] = G(dk.r + p * PiecesDK::kStep);
    CUTE_UNROLL
    for (int p = 0; p < PiecesDK::kPieces; ++p) {
      const float fq = scale * ex2(Gr[p]), fk = ex2(last - Gr[p]);
      scale_piece(q0 + dk.offset[p], [&](int) { return fq; });
      scale_piece(k0 + dk.offset[p], [&](int) { return fk; });
    }
    if (dk.r == 0)
      CUTE_UNROLL
      for (int e = 0; e < 8; ++e) sm.decay[s][dk.c + e] = ex2(last);
  }

  // Once the state warpgroup is done with step i: the chunk's dv2 rows and its dh tile out.
  CUTE_DEVICE void store_outputs(int i) {
    const int s = i % T::kStages, j = chunk_of(i);
    ChunkBarriers::sync(ChunkBarriers::kEmpty + s, 256);
    auto& sm = smem();
    Tensor sDv2 = make_tensor(make_smem_ptr(sm.stage[s].dv.data()), typename T::LayoutRowsBV{});  // [C, BV]
    store_chunk_rows<kBV>(sDv2, static_cast<Element*>(a.dv2.ptr) + int64_t(it.vb) * kBV, a.dv2, it, int64_t(j) * kC, it.hv,
                          it.valid_rows(j), a.dv2_vec16);
    // dh[chunk] [DK, BV] from the buffer the step's GEMM read; 16-byte pieces along the value axis.
    Tensor sDh = make_tensor(make_smem_ptr(sm.dh[i % 2].data()), typename T::LayoutDh{});
    const int64_t chunk = (a.chunk_offsets ? a.chunk_offsets[it.n] : 0) + j;
    Element* dh = static_cast<Element*>(a.dh) + it.b * a.dh_sb + chunk * a.dh_sc + int64_t(it.hv) * a.dh_sh +
                  int64_t(it.vb) * kBV * a.dh_sv;
    constexpr int kUnits = kBV / 8, kStep = 128 / kUnits;
    const int c = (tid % kUnits) * 8;
    CUTE_UNROLL
    for (int r = tid / kUnits; r < kDK; r += kStep) {
      const uint4 piece = ld_shared_v4(&sDh(r, c));
      Element* dst = dh + int64_t(r) * a.dh_sk + int64_t(c) * a.dh_sv;
      if (a.dh_vec16) {
        *reinterpret_cast<uint4*>(dst) = piece;
      } else {
        const auto& x = reinterpret_cast<const cutlass::Array<Element, 8>&>(piece);
        CUTE_UNROLL
        for (int e = 0; e < 8; ++e) dst[e * a.dh_sv] = x[e];
      }
    }
    // The state warpgroup refills this buffer two steps later (bwd_dhu_state.cuh): it waits for
    // this signal from every step but the last two, whose buffers are never refilled.
    if (i + 2 < it.nchunks) ChunkBarriers::arrive(ChunkBarriers::kDhFree, 256);
  }

  CUTE_DEVICE void run() {
    const int n = it.nchunks;
    const auto& st0 = smem().stage[0];
    const PiecesDK dk(tid, st0.q.data());
    const PiecesBV bv(tid, st0.dout.data());
    load_chunk(dk, bv, 0);  // n >= 1 here
    cp_async_commit();
    if (n > 1) load_chunk(dk, bv, 1);
    cp_async_commit();
    for (int i = 0; i < n; ++i) {
      cp_async_wait<1>();  // this thread's copies of step i landed (i + 1 may be in flight)
      fold_gates(dk, i);
      cutlass::arch::fence_view_async_shared();  // the state warpgroup's WGMMAs read these rows
      ChunkBarriers::arrive(ChunkBarriers::kFull + i % T::kStages, 256);
      // Step i + 2 goes where step i - 1 was, once that step's outputs are out.
      if (i >= 1) store_outputs(i - 1);
      if (i + 2 < n) {
        if (i >= 1) sync();  // every read of step i - 1's dv2 rows is done
        load_chunk(dk, bv, i + 2);
      }
      cp_async_commit();
    }
    store_outputs(n - 1);
  }
};

}  // namespace attnkit::cuda::gdn
