// src/cuda/gdn/chunk_bwd_load.cuh — the chunked backward's per-chunk kernels (chunk_bwd_kernel.cuh):
// their shared-memory layout, and how their tiles get there. The gradient kernel's items are
// (chunk slot, value head); an item's operands come in two groups — early (H, dh, do, v_new: dead
// half way through the item) and late (dv2, k, q, v, T) — each by TMA on its own transaction
// barrier where every row is 16-byte aligned, else by cp.async (16-byte pieces, or element by
// element), and the next item's groups go out while the current one computes.
#pragma once
#include <cutlass/arch/barrier.h>
#include <cutlass/fast_math.h>

#include <type_traits>

#include "src/cuda/gdn/chunk_bwd_args.cuh"
#include "src/cuda/gdn/chunk_bwd_tiles.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"
#include "src/cuda/gdn/row_tma.cuh"

namespace attnkit::cuda::gdn {

// Shared memory of the per-chunk kernels: swizzled 16-bit tiles (byte offsets, 1024-byte
// multiples), then fp32 vectors.
template <int kD>
struct ChunkBwdLayout {
  static constexpr int kRowBytes = 64 * kD * 2, kStateBytes = kD * kD * 2, kSquareBytes = 64 * 64 * 2;
  enum { kQ, kK, kV, kDo, kVn, kDv2, kDw, kRowTiles };
  static constexpr int kH = kRowTiles * kRowBytes, kDh = kH + kStateBytes;
  static constexpr int kT = kDh + kStateBytes, kSq0 = kT + kSquareBytes, kSq1 = kSq0 + kSquareBytes;
  static constexpr int kVec = kSq1 + kSquareBytes;
  // dv_local needs Q, K, do (the first row tiles) and one square only.
  static constexpr int kDvlSquare = (kDo + 1) * kRowBytes, kDvlVec = kDvlSquare + kSquareBytes;
  static_assert(kRowBytes % 1024 == 0 && kStateBytes % 1024 == 0, "swizzled tiles start 1024-byte aligned");
};
struct ChunkBwdVectors {
  float gamma[64], beta[64];  // gamma (log2 units) past the end: the last live row's; beta 0
  float eg[64], egl[64];      // exp(gamma), exp(gamma_last - gamma)
  float row_dgam[2][64], row_dbeta[2][64];  // per column half: row sums
  float col_dgam[4][64];      // per row block: column sums (dgamma_j -= sum_i beta_i Z_ij)
  float last[8];              // per warp: its share of the chunk-end terms of dgamma_last
  float row_dot[2][2][64];    // per [dq or dk][column half]: y . dy of the l2norm backward
  float inv_norm[2][64];      // Q's, K's rows' inverse norms (in-op l2norm): dv_local's, or the gradient kernel's RowValues
  float fold[2][64];          // the gradient kernel's Q, K row factors f: rstd with fold_norms (raw rows), else 1
  // ... and in the products' exponents (log2 units; fold 0 past the end: -inf, which zeroes the
  // entry): gamma + log2 fq, gamma + log2 fk (rows), gamma - log2 fk (columns); exp(gamma) fk
  float g_fq[64], g_fk[64], g_over_fk[64], eg_fk[64];
  float dgam[64];
};
// The gradient kernel's two transaction barriers (TMA path) after the vectors: the early and the
// late operands' bytes.
template <int kD>
constexpr int chunk_bwd_barriers_offset() { return ChunkBwdLayout<kD>::kVec + int(sizeof(ChunkBwdVectors)); }
static_assert(sizeof(ChunkBwdVectors) % 8 == 0, "the barriers after the vectors are 8-byte aligned");
template <int kD>
constexpr int chunk_bwd_smem_bytes() { return chunk_bwd_barriers_offset<kD>() + 2 * int(sizeof(cutlass::arch::ClusterTransactionBarrier)); }
template <int kD>
constexpr int dv_local_smem_bytes() { return ChunkBwdLayout<kD>::kDvlVec + int(sizeof(ChunkBwdVectors)); }

constexpr int kChunkBwdThreads = 256;

// The persistent dv_local (TMA rows): two stages of Q, K, do (row tiles 3s .. 3s + 2), then the
// [64, 64] scratch tile, the vectors and each stage's transaction barrier. ~109 KB at D = 128:
// two CTAs an SM, each with the next item's rows in flight while it computes the current one.
template <int kD>
struct DvLocalLayout {
  using L = ChunkBwdLayout<kD>;
  static constexpr int kStageTiles = 3, kSquare = 2 * kStageTiles * L::kRowBytes;
  static constexpr int kVec = kSquare + L::kSquareBytes;
  static constexpr int kBarriers = kVec + int(sizeof(ChunkBwdVectors));
  static constexpr int kBytes = kBarriers + 2 * int(sizeof(cutlass::arch::ClusterTransactionBarrier));
};

// The copies below: thread t copies the 16-byte piece t % (kCols / 8) of rows t / (kCols / 8) +
// i * kStep, its two addresses worked out once and stepped by constants (fully unrolled, the
// 16-byte-or-element choice made once outside the loop). kStep rows on, a swizzled tile's
// pattern repeats (8-row atoms): the shared address steps by kStep rows of the atom.
template <int kCols>
struct PieceWalk {
  static constexpr int kUnits = kCols / 8, kStep = kChunkBwdThreads / kUnits;
  static_assert(kChunkBwdThreads % kUnits == 0 && kStep % 8 == 0);
  int r, c;
  __device__ PieceWalk() : r(int(threadIdx.x) / kUnits), c((int(threadIdx.x) % kUnits) * 8) {}
};

// Rows of chunk j of one head of x into the tile m [64, kCols]; rows at or past `valid` zero-filled.
template <class E, int kCols>
__device__ void load_rows(const tiles::Tile<E, 64, kCols>& m, const E* base, const RowTensor& x, const WorkItem& it, int head,
                          int j, int valid, bool vec16) {
  using W = PieceWalk<kCols>;
  using M = tiles::Tile<E, 64, kCols>;
  const W w;
  const E* chunk = base + it.row(x, int64_t(j) * 64, head);  // row 0: valid in every chunk
  const E* src = chunk + w.r * x.st + w.c;
  const int64_t step = int64_t(W::kStep) * x.st;
  const uint32_t dst = m.at(w.r, w.c);
  auto pieces = [&](auto vec) {
#pragma unroll
    for (int i = 0; i < 64 / W::kStep; ++i) {
      const bool ok = w.r + i * W::kStep < valid;
      copy16(dst + uint32_t(i * W::kStep * M::kRowBytes), ok ? src + i * step : chunk, ok, decltype(vec)::value);
    }
  };
  if (vec16) pieces(std::true_type{});
  else pieces(std::false_type{});
}
// A contiguous [kD, kD] 16-bit matrix (a chunk's state or dh) into the tile m.
template <class E, int kD>
__device__ void load_state(const tiles::Tile<E, kD, kD>& m, const E* src) {
  using W = PieceWalk<kD>;
  using M = tiles::Tile<E, kD, kD>;
  const W w;
  src += w.r * kD + w.c;
  const uint32_t dst = m.at(w.r, w.c);
#pragma unroll
  for (int i = 0; i < kD / W::kStep; ++i) copy16(dst + uint32_t(i * W::kStep * M::kRowBytes), src + i * W::kStep * kD, true, true);
}

// Rows at or past `valid` of the tile m [64, kCols] set to zero (this thread's pieces): a TMA box
// reads on past a sequence's end into the next sequence's rows (row_tma.cuh).
template <class E, int kCols>
__device__ void zero_rows_from(const tiles::Tile<E, 64, kCols>& m, int valid) {
  using W = PieceWalk<kCols>;
  using M = tiles::Tile<E, 64, kCols>;
  const W w;
  const uint32_t dst = m.at(w.r, w.c);
#pragma unroll
  for (int i = 0; i < 64 / W::kStep; ++i)
    if (w.r + i * W::kStep >= valid) st_shared(dst + uint32_t(i * W::kStep * M::kRowBytes), make_uint4(0, 0, 0, 0));
}

// The tiles of the layout, by element type.
template <class E, int kD>
struct ChunkBwdTiles {
  using L = ChunkBwdLayout<kD>;
  using Rows = tiles::Tile<E, 64, kD>;    // [C, D]: one chunk's rows
  using State = tiles::Tile<E, kD, kD>;   // [K, V]
  using Square = tiles::Tile<E, 64, 64>;  // [C, C]
  static __device__ Rows rows(int t) { return {uint32_t(t * L::kRowBytes)}; }
  static __device__ State h() { return {uint32_t(L::kH)}; }
  static __device__ State dh() { return {uint32_t(L::kDh)}; }
  static __device__ Square square(int off) { return {uint32_t(off)}; }
};

// The gradient kernel's parameters: its arguments and, when `tma` (every row 16-byte aligned: the
// op's q, k, v, do as a.vec16 says; the workspace's always are), the TMA descriptors of its tiles
// (row_tma.cuh): one thread issues a tile's box instead of every thread copying 16-byte pieces.
// The states and dh ([slots, HV, D, D], contiguous) are a [slots * HV * D, D] row tensor whose
// box b is (slot, value head) b = slot * HV + hv.
template <class E, int kD>
struct ChunkBwdParams {
  using S = ChunkBwdTiles<E, kD>;
  using RowsLayout = typename S::Rows::KMajor;
  using SquareLayout = typename S::Square::KMajor;
  using StateLayout = typename S::State::KMajor;
  static constexpr uint32_t kEarlyBytes = 2 * S::State::kBytes + 2 * S::Rows::kBytes;      // H, dh, do, v_new
  static constexpr uint32_t kLateBytes = 4 * S::Rows::kBytes + S::Square::kBytes;         // dv2, k, q, v, T
  ChunkBwdArgs a;
  bool tma = false;
  RowsShape shape_qk, shape_v, shape_t, shape_state;  // (t, d, head, batch)
  RowsTma<E, RowsLayout> tma_q, tma_k, tma_v, tma_do, tma_vn, tma_dv2;
  RowsTma<E, SquareLayout> tma_t;
  RowsTma<E, StateLayout> tma_h, tma_dh;
  // Items below 2^31 (fast_items): an item's value head and slot, and a dense slot's sequence
  // and chunk, by precomputed divisors (HV; chunks a sequence, at least 1) instead of two 64-bit
  // division sequences per item in every thread (BwdItem).
  bool fast_items = false;
  cutlass::FastDivmod by_heads, by_seq_chunks;
};

// Chunk j's rows of one head into the tile at `tile`, completing on `bar` (one thread).
template <class Layout, class Tma, class E>
__device__ void issue_rows(const Tma& tma, const RowsShape& shape, const WorkItem& it, int head, int j, E* tile, uint64_t& bar) {
  issue_rows_box(tma, rows_boxes<Layout>(tma, shape, it, head, 0, tile), j, 0, bar);
}
// Box `index` of a [rows, D] state tensor into the tile at `tile` (one thread).
template <class TileLayout, class Tma, class E>
__device__ void issue_state(const Tma& tma, const RowsShape& shape, int index, E* tile, uint64_t& bar) {
  Tensor m = tma.get_tma_tensor(shape)(_, _, 0, 0);                      // (rows, d)
  Tensor g = local_tile(m, BoxShape<TileLayout>{}, make_coord(_, 0));    // (D, D, boxes)
  Tensor t = make_tensor(make_smem_ptr(tile), TileLayout{});
  auto boxes = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(t), group_modes<0, 2>(g));
  copy(tma.with(bar), get<0>(boxes)(_, index), get<1>(boxes));
}
__device__ inline cutlass::arch::ClusterTransactionBarrier* chunk_bwd_barriers(int offset) {
  return reinterpret_cast<cutlass::arch::ClusterTransactionBarrier*>(gdn_chunk_smem + offset);
}

// The gradient kernel's items: (chunk slot, value head), the value head fastest so that the CTAs
// running together share q and k rows in L2.
struct BwdItem {
  ChunkSlot slot;
  int hv = 0;
  int t0 = 0, len = 0;  // with a.slot_items: the sequence's first row and length, for work()
  BwdItem() = default;
  __device__ BwdItem(const ChunkBwdArgs& a, int64_t item) : hv(static_cast<int>(item % a.HV)) { set_slot(a, item / a.HV); }
  // The same for item < 2^31 by ChunkBwdParams' divisors (varlen slots from a.slot_items).
  __device__ BwdItem(const ChunkBwdArgs& a, int item, const cutlass::FastDivmod& by_heads,
                     const cutlass::FastDivmod& by_seq_chunks) {
    int s;
    by_heads(s, hv, item);
    if (a.slot_items) set_slot(a, s);
    else slot = ChunkSlot(a, s, by_seq_chunks);
  }
  __device__ void set_slot(const ChunkBwdArgs& a, int64_t s) {
    if (!a.slot_items) {
      slot = ChunkSlot(a, s);
      return;
    }
    set_record(a.slot_items[s]);
  }
  // From slot s's record in a.slot_items: {sequence, chunk or -1, first row, length}.
  __device__ void set_record(const int4 e) {
    slot.n = e.x;
    slot.j = max(e.y, 0);
    slot.live = e.y >= 0;
    t0 = e.z;
    len = e.w;
  }
  // Its WorkItem (built three times an item: the early and late loads, the gradients). Without
  // GVA the qk head is the value head: WorkItem's 64-bit qk_head_of division, at every item of
  // every warp, was 5.7% of the kernel's stall samples at B4 (ncu, forty-third session). With
  // the slot table, the sequence's rows from it: no cu_seqlens loads waited for right away.
  __device__ WorkItem work(const ChunkBwdArgs& a) const {
    if (a.slot_items) return WorkItem(slot.n, hv, qk_head_fast(a, hv), WorkItem::KnownRows{t0, len});
    return WorkItem(a, slot.n, hv, 0, qk_head_fast(a, hv));
  }
};

// Row r's gamma (the last live row's past the end) and raw beta (0 past the end) for thread
// r < 64, and with `norms` q's and k's inverse norms (the direct l2norm backward's; 0 past the
// end). The gradient kernel loads them an item ahead into registers: a global load at the item's
// start (or, for the norms, at dq's and dk's stores: ~8% of the kernel's stall samples in v9)
// would stall every warp at the next barrier. Beta stays raw bits (AnyFloat::bits) until used: its
// bf16 conversion right after the load held warps 0 and 1 there mid-item (ncu: 1.8% of the
// gradient kernel's stall samples, long scoreboard).
struct RowValues {
  float gamma = 0.f, gamma_last = 0.f, rstd_q = 0.f, rstd_k = 0.f;  // gamma_last: the last live row's
  uint32_t beta_bits = 0;  // 0 past the end: 0.f in every dtype
};
__device__ inline RowValues load_row_values(const ChunkBwdArgs& a, const WorkItem& it, int j, int valid, bool norms = false) {
  RowValues x;
  const int r = threadIdx.x;
  if (r < 64) {
    const float* gamma = static_cast<const float*>(a.gamma.ptr);
    x.gamma = gamma[it.row(a.gamma, int64_t(j) * 64 + min(r, valid - 1), it.hv)];
    x.gamma_last = gamma[it.row(a.gamma, int64_t(j) * 64 + valid - 1, it.hv)];
    if (r < valid) {
      x.beta_bits = a.beta.bits_at(it.b, it.t0 + int64_t(j) * 64 + r, it.hv);
      if (norms) {
        x.rstd_q = static_cast<const float*>(a.rstd_q.ptr)[it.row(a.rstd_q, int64_t(j) * 64 + r, it.h)];
        x.rstd_k = static_cast<const float*>(a.rstd_k.ptr)[it.row(a.rstd_k, int64_t(j) * 64 + r, it.h)];
      }
    }
  }
  return x;
}

// One TMA group, by the calling thread: the CTA's earlier generic accesses of the tiles ordered
// before the async writes, `bytes` expected on `bar`, then issue(bar) puts out the boxes.
template <class Issue>
__device__ void tma_group(cutlass::arch::ClusterTransactionBarrier& bar, uint32_t bytes, Issue&& issue) {
  cutlass::arch::fence_view_async_shared();
  bar.arrive_and_expect_tx(bytes);
  issue(reinterpret_cast<uint64_t&>(bar));
}
// The gradient kernel's barrier `which` (0 early, 1 late).
template <int kD>
__device__ cutlass::arch::ClusterTransactionBarrier& gradient_barrier(int which) {
  return chunk_bwd_barriers(chunk_bwd_barriers_offset<kD>())[which];
}
// A tile's shared memory as the TMA's destination.
template <class T>
__device__ auto* tma_tile(const T& t) {
  return const_cast<std::remove_const_t<std::remove_pointer_t<decltype(t.ptr())>>*>(t.ptr());
}

// The gradient kernel's operands that die at its "dw, dP complete" barrier — H, dh, do, v_new of
// one item — into their tiles: by TMA on the early barrier (thread 0) or as one cp.async group;
// and the item's RowValues (their loads still in flight on return).
template <class E, int kD>
__device__ RowValues load_early_operands(const ChunkBwdParams<E, kD>& p, const BwdItem& bi) {
  using S = ChunkBwdTiles<E, kD>;
  using L = ChunkBwdLayout<kD>;
  using P = ChunkBwdParams<E, kD>;
  const ChunkBwdArgs& a = p.a;
  const WorkItem it = bi.work(a);
  const int j = bi.slot.j, valid = it.valid_rows(j);
  const int64_t state = (ChunkSlot::first(a, it) + j) * a.HV + bi.hv;  // (it.n is bi.slot.n)
  if (p.tma) {
    if (threadIdx.x == 0)
      tma_group(gradient_barrier<kD>(0), P::kEarlyBytes, [&](uint64_t& bar) {
        issue_state<typename P::StateLayout>(p.tma_h, p.shape_state, int(state), tma_tile(S::h()), bar);
        issue_state<typename P::StateLayout>(p.tma_dh, p.shape_state, int(state), tma_tile(S::dh()), bar);
        issue_rows<typename P::RowsLayout>(p.tma_do, p.shape_v, it, it.hv, j, tma_tile(S::rows(L::kDo)), bar);
        issue_rows<typename P::RowsLayout>(p.tma_vn, p.shape_v, it, it.hv, j, tma_tile(S::rows(L::kVn)), bar);
      });
  } else {
    const int64_t at = state * int64_t(kD) * kD;
    load_state(S::h(), static_cast<const E*>(a.states) + at);
    load_rows(S::rows(L::kDo), static_cast<const E*>(a.dout.ptr), a.dout, it, it.hv, j, valid, a.vec16);
    load_rows(S::rows(L::kVn), static_cast<const E*>(a.vnew.ptr), a.vnew, it, it.hv, j, valid, true);
    load_state(S::dh(), static_cast<const E*>(a.dh) + at);
    cp_async_commit();
  }
  return load_row_values(a, it, j, valid, a.rstd_q.ptr != nullptr && (a.direct || a.fold_norms));
}

// The operands read until the end of an item — dv2, k, q, v, T — by TMA on the late barrier
// (issued by thread `issuer`) or as one cp.async group. Issued as soon as the previous item's
// last reads of these tiles are behind a barrier: during its last sums (warp 0's), so thread 128
// issues them there.
template <class E, int kD>
__device__ void load_late_operands(const ChunkBwdParams<E, kD>& p, const BwdItem& bi, int issuer) {
  using S = ChunkBwdTiles<E, kD>;
  using L = ChunkBwdLayout<kD>;
  using P = ChunkBwdParams<E, kD>;
  const ChunkBwdArgs& a = p.a;
  const WorkItem it = bi.work(a);
  const int j = bi.slot.j, valid = it.valid_rows(j);
  const auto dv2 = S::rows(L::kDv2), k = S::rows(L::kK), q = S::rows(L::kQ), v = S::rows(L::kV);
  const auto tm = S::square(L::kT);
  if (p.tma) {
    if (int(threadIdx.x) == issuer)
      tma_group(gradient_barrier<kD>(1), P::kLateBytes, [&](uint64_t& bar) {
        issue_rows<typename P::RowsLayout>(p.tma_dv2, p.shape_v, it, it.hv, j, tma_tile(dv2), bar);
        issue_rows<typename P::RowsLayout>(p.tma_k, p.shape_qk, it, it.h, j, tma_tile(k), bar);
        issue_rows<typename P::RowsLayout>(p.tma_q, p.shape_qk, it, it.h, j, tma_tile(q), bar);
        issue_rows<typename P::RowsLayout>(p.tma_v, p.shape_v, it, it.hv, j, tma_tile(v), bar);
        issue_rows<typename P::SquareLayout>(p.tma_t, p.shape_t, it, it.hv, j, tma_tile(tm), bar);
      });
  } else {
    load_rows(dv2, static_cast<const E*>(a.dv2.ptr), a.dv2, it, it.hv, j, valid, true);
    load_rows(k, static_cast<const E*>(a.k.ptr), a.k, it, it.h, j, valid, a.vec16);
    load_rows(q, static_cast<const E*>(a.q.ptr), a.q, it, it.h, j, valid, a.vec16);
    load_rows(v, static_cast<const E*>(a.v.ptr), a.v, it, it.hv, j, valid, a.vec16);
    load_rows(tm, static_cast<const E*>(a.tmat.ptr), a.tmat, it, it.hv, j, valid, true);
    cp_async_commit();
  }
}
constexpr int kLateIssuer = 128;  // warpgroup 1's first thread: warp 0 sums the item's last rows

// The persistent dv_local's item rows — Q, K, do into stage `stage` (DvLocalLayout), on that
// stage's barrier, by thread 0 — and its RowValues (their loads still in flight on return).
template <class E, int kD>
__device__ RowValues load_dv_local_operands(const ChunkBwdParams<E, kD>& p, const BwdItem& bi, int stage) {
  using S = ChunkBwdTiles<E, kD>;
  using DL = DvLocalLayout<kD>;
  using P = ChunkBwdParams<E, kD>;
  const ChunkBwdArgs& a = p.a;
  const WorkItem it = bi.work(a);
  const int j = bi.slot.j, valid = it.valid_rows(j);
  if (threadIdx.x == 0) {
    const int t = DL::kStageTiles * stage;
    tma_group(chunk_bwd_barriers(DL::kBarriers)[stage], 3 * S::Rows::kBytes, [&](uint64_t& bar) {
      issue_rows<typename P::RowsLayout>(p.tma_q, p.shape_qk, it, it.h, j, tma_tile(S::rows(t)), bar);
      issue_rows<typename P::RowsLayout>(p.tma_k, p.shape_qk, it, it.h, j, tma_tile(S::rows(t + 1)), bar);
      issue_rows<typename P::RowsLayout>(p.tma_do, p.shape_v, it, it.hv, j, tma_tile(S::rows(t + 2)), bar);
    });
  }
  return load_row_values(a, it, j, valid, a.fold_norms);
}

// The copies of this thread have landed and are visible to the WGMMAs (the async proxy) once every
// thread has passed the barrier that follows.
template <int kPending>
__device__ void copies_landed() {
  cp_async_wait<kPending>();
  cutlass::arch::fence_view_async_shared();
}

// Host: the gradient kernel's TMA descriptors (row_tma.cuh), for `slots` chunk slots.
template <class E, int kD>
void make_chunk_bwd_tmas(ChunkBwdParams<E, kD>& p, int64_t slots) {
  using P = ChunkBwdParams<E, kD>;
  const ChunkBwdArgs& a = p.a;
  const int batch = a.cu_seqlens ? 1 : a.num_seqs;
  p.shape_qk = rows_shape(a.tokens, kD, a.H, batch);
  p.shape_v = rows_shape(a.tokens, kD, a.HV, batch);
  p.shape_t = rows_shape(a.tokens, 64, a.HV, batch);
  p.tma_q = make_rows_tma<E, typename P::RowsLayout>(a.q, p.shape_qk);
  p.tma_k = make_rows_tma<E, typename P::RowsLayout>(a.k, p.shape_qk);
  p.tma_v = make_rows_tma<E, typename P::RowsLayout>(a.v, p.shape_v);
  p.tma_do = make_rows_tma<E, typename P::RowsLayout>(a.dout, p.shape_v);
  p.tma_vn = make_rows_tma<E, typename P::RowsLayout>(a.vnew, p.shape_v);
  p.tma_dv2 = make_rows_tma<E, typename P::RowsLayout>(a.dv2, p.shape_v);
  p.tma_t = make_rows_tma<E, typename P::SquareLayout>(a.tmat, p.shape_t);
  // [slots * HV * D, D]: one head, one batch entry.
  const int64_t state_rows = slots * a.HV * kD;
  p.shape_state = rows_shape(state_rows, kD, 1, 1);
  const RowTensor states{const_cast<void*>(a.states), 0, kD, kD}, dh{const_cast<void*>(a.dh), 0, kD, kD};
  p.tma_h = make_rows_tma<E, typename P::StateLayout>(states, p.shape_state);
  p.tma_dh = make_rows_tma<E, typename P::StateLayout>(dh, p.shape_state);
}

}  // namespace attnkit::cuda::gdn
