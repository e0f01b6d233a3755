// src/cuda/gdn/chunk_bwd_kernel.cuh — the chunked backward's two per-chunk kernels (spec/gdn.md,
// Backward), CTAs of 8 warps on (chunk, value head) items:
//   dv_local: dv_loc = scale (tril(Q K^T) Gamma)^T do                              (step 1)
//             one CTA per item, every item at once;
//   gradient: steps 3 and 4 from the chunk's start state H, dh (bwd_dhu's gradient of its end
//             state), v_new, dv2 and T0 -> dq, dk (per value head), dv, dbeta, dg; persistent
//             CTAs (one per SM, shared memory allows no more) that load the next item's H, dh,
//             do and v_new while the current one computes (they are dead half way through).
// Warp w owns rows 16 (w % 4) .. + 16 of every [64, x] product and half of its columns
// (w / 4). Every operand is a padded 16-bit tile in shared memory (warp_tiles.cuh), read as X or
// X^T as each product needs; fp32 accumulators in registers.
//
// Sums over a row or a column (dbeta, dgamma) are reduced by shuffles and written once per
// (warp, row): no float atomics, so the gradients are the same bits run after run.
#pragma once
#include <type_traits>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/gdn/chunk_bwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"
#include "src/cuda/gdn/warp_tiles.cuh"

namespace attnkit::cuda::gdn {

// Shared memory of the per-chunk kernels: padded 16-bit tiles (byte offsets), then fp32 vectors.
template <int kD>
struct ChunkBwdLayout {
  using Rows = tiles::SmemMat<64, kD>;    // [C, D]: one chunk's rows
  using State = tiles::SmemMat<kD, kD>;   // [K, V]
  using Square = tiles::SmemMat<64, 64>;  // [C, C]
  enum { kQ, kK, kV, kDo, kVn, kDv2, kDw, kRowTiles };
  static constexpr int kH = kRowTiles * Rows::kBytes, kDh = kH + State::kBytes;
  static constexpr int kT = kDh + State::kBytes, kSq0 = kT + Square::kBytes, kSq1 = kSq0 + Square::kBytes;
  static constexpr int kVec = kSq1 + Square::kBytes;
  // dv_local needs Q, K, do (the first row tiles) and one square only.
  static constexpr int kDvlSquare = (kDo + 1) * Rows::kBytes, kDvlVec = kDvlSquare + Square::kBytes;
};
struct ChunkBwdVectors {
  float gamma[64], beta[64];  // gamma (log2 units) past the end: the last live row's; beta 0
  float eg[64], egl[64];      // exp(gamma), exp(gamma_last - gamma)
  float row_dgam[2][64], row_dbeta[2][64];  // per column half: row sums
  float col_dgam[4][64];      // per row block: column sums (dgamma_j -= sum_i beta_i Z_ij)
  float last[8];              // per warp: its share of the chunk-end terms of dgamma_last
  float row_dot[2][64];       // per column half: y . dy of the l2norm backward
  float dgam[64];
};
template <int kD>
constexpr int chunk_bwd_smem_bytes() { return ChunkBwdLayout<kD>::kVec + int(sizeof(ChunkBwdVectors)); }
template <int kD>
constexpr int dv_local_smem_bytes() { return ChunkBwdLayout<kD>::kDvlVec + int(sizeof(ChunkBwdVectors)); }

constexpr int kChunkBwdThreads = 256;

// The copies below: thread t copies the 16-byte piece t % (kCols / 8) of rows t / (kCols / 8) +
// i * kStep, its two addresses worked out once and stepped by constants (fully unrolled, the
// 16-byte-or-element choice made once outside the loop): a few instructions a piece, not ~20.
template <int kCols>
struct PieceWalk {
  static constexpr int kUnits = kCols / 8, kStep = kChunkBwdThreads / kUnits;
  static_assert(kChunkBwdThreads % kUnits == 0);
  int r, c;
  __device__ PieceWalk() : r(int(threadIdx.x) / kUnits), c((int(threadIdx.x) % kUnits) * 8) {}
};

// Rows of chunk j of one head of x into the padded tile m; rows at or past `valid` zero-filled.
template <int kCols, class E>
__device__ void load_rows(const tiles::SmemMat<64, kCols>& m, const E* base, const RowTensor& x, const WorkItem& it, int head,
                          int j, int valid, bool vec16) {
  using W = PieceWalk<kCols>;
  const W w;
  const E* chunk = base + it.row(x, int64_t(j) * 64, head);  // row 0: valid in every chunk
  const E* src = chunk + w.r * x.st + w.c;
  const int64_t step = int64_t(W::kStep) * x.st;
  const uint32_t dst = m.at(w.r, w.c);
  auto pieces = [&](auto vec) {
#pragma unroll
    for (int i = 0; i < 64 / W::kStep; ++i) {
      const bool ok = w.r + i * W::kStep < valid;
      copy16(dst + uint32_t(i * W::kStep * m.kPitch * 2), ok ? src + i * step : chunk, ok, decltype(vec)::value);
    }
  };
  if (vec16) pieces(std::true_type{});
  else pieces(std::false_type{});
}
// A contiguous [kD, kD] 16-bit matrix (a chunk's state or dh) into the padded tile m.
template <int kD, class E>
__device__ void load_state(const tiles::SmemMat<kD, kD>& m, const E* src) {
  using W = PieceWalk<kD>;
  const W w;
  src += w.r * kD + w.c;
  const uint32_t dst = m.at(w.r, w.c);
#pragma unroll
  for (int i = 0; i < kD / W::kStep; ++i) copy16(dst + uint32_t(i * W::kStep * m.kPitch * 2), src + i * W::kStep * kD, true, true);
}

// The gradient kernel's items: (chunk slot, value head), the value head fastest so that the CTAs
// running together share q and k rows in L2.
struct BwdItem {
  ChunkSlot slot;
  int hv = 0;
  BwdItem() = default;
  __device__ BwdItem(const ChunkBwdArgs& a, int64_t item) : slot(a, item / a.HV), hv(static_cast<int>(item % a.HV)) {}
};

// Row r's gamma (the last live row's past the end) and raw beta (0 past the end) for thread
// r < 64. The gradient kernel loads them an item ahead into registers: a global load at the item's
// start would stall every warp at its first barrier.
struct RowValues {
  float gamma = 0.f, beta = 0.f;
};
__device__ inline RowValues load_row_values(const ChunkBwdArgs& a, const WorkItem& it, int j, int valid) {
  RowValues x;
  const int r = threadIdx.x;
  if (r < 64) {
    x.gamma = static_cast<const float*>(a.gamma.ptr)[it.row(a.gamma, int64_t(j) * 64 + min(r, valid - 1), it.hv)];
    if (r < valid) x.beta = a.beta.at(it.b, it.t0 + int64_t(j) * 64 + r, it.hv);
  }
  return x;
}

// The gradient kernel's operands that die at its "dw, dP complete" barrier — H, dh, do, v_new of
// one item — as one cp.async group, into the tiles of the shared-memory layout at `base`; and
// the item's RowValues (their loads still in flight on return).
template <class E, int kD>
__device__ RowValues load_early_operands(const ChunkBwdArgs& a, const BwdItem& bi, uint32_t base) {
  using L = ChunkBwdLayout<kD>;
  const WorkItem it(a, bi.slot.n, bi.hv, 0);
  const int j = bi.slot.j, valid = it.valid_rows(j);
  const typename L::State h{base + uint32_t(L::kH)}, dh{base + uint32_t(L::kDh)};
  const typename L::Rows dout{base + uint32_t(L::kDo * L::Rows::kBytes)}, vn{base + uint32_t(L::kVn * L::Rows::kBytes)};
  const int64_t at = ((ChunkSlot::first(a, bi.slot.n) + j) * a.HV + bi.hv) * int64_t(kD) * kD;
  load_state(h, static_cast<const E*>(a.states) + at);
  load_rows(dout, static_cast<const E*>(a.dout.ptr), a.dout, it, it.hv, j, valid, a.vec16);
  load_rows(vn, static_cast<const E*>(a.vnew.ptr), a.vnew, it, it.hv, j, valid, true);
  load_state(dh, static_cast<const E*>(a.dh) + at);
  cp_async_commit();
  return load_row_values(a, it, j, valid);
}

template <class E, int kD>
struct ChunkBwd {
  using L = ChunkBwdLayout<kD>;
  using Rows = typename L::Rows;
  using Square = typename L::Square;
  using Stored = tiles::Stored;
  static constexpr Stored kRow = Stored::kRowMajor, kTr = Stored::kTransposed;
  static constexpr int kHalf = kD / 2;  // a warp's columns of a [64, D] product
  template <int kN>
  using Acc = tiles::Acc<kN>;

  const ChunkBwdArgs& a;
  const WorkItem& it;
  int j, valid;
  ChunkBwdVectors& vec;  // in shared memory, after the tiles
  int warp = threadIdx.x / 32, m0 = 16 * (warp % 4), side = warp / 4;  // side: which column half
  uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(gdn_chunk_smem));

  __device__ Rows rows(int t) const { return {base + uint32_t(t * Rows::kBytes)}; }
  __device__ Square square(int off) const { return {base + uint32_t(off)}; }
  __device__ int64_t t0() const { return int64_t(j) * 64; }
  __device__ int row(int e) const { return m0 + Acc<8>::row(e); }

  // gamma, beta (sigmoid applied), exp(gamma), exp(gamma_last - gamma): threads 0..63.
  __device__ void store_row_values(const RowValues& x) {
    const int r = threadIdx.x;
    if (r < 64) {
      vec.gamma[r] = x.gamma;
      vec.beta[r] = r < valid && a.beta_logit ? sigmoid(x.beta) : x.beta;
    }
  }
  __device__ void exponentials() {
    const int r = threadIdx.x;
    if (r < 64) {
      vec.eg[r] = ex2(vec.gamma[r]);
      vec.egl[r] = ex2(vec.gamma[63] - vec.gamma[r]);
    }
  }

  // acc's live rows -> fp32 [rows, HV, D] at columns n0.. (dq, dk). Each of the thread's two rows'
  // address is worked out once; its n-tiles are 8 columns apart.
  __device__ void store_f32(const Acc<kHalf>& acc, const RowTensor& x, int n0) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row(2 * h) >= valid) continue;
      float* out = static_cast<float*>(x.ptr) + it.row(x, t0() + row(2 * h), it.hv) + n0 + Acc<kHalf>::col(0, 0);
#pragma unroll
      for (int t = 0; t < Acc<kHalf>::kTiles; ++t)
        *reinterpret_cast<float2*>(out + 8 * t) = make_float2(acc.c[t][2 * h], acc.c[t][2 * h + 1]);
    }
  }
  // acc's live rows -> 16-bit [B, T, heads, D] at columns n0.. of `head` (dv, dv_local, dq, dk).
  __device__ void store_16(const Acc<kHalf>& acc, const RowTensor& x, int n0, int head) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row(2 * h) >= valid) continue;
      E* out = static_cast<E*>(x.ptr) + it.row(x, t0() + row(2 * h), head) + n0 + Acc<kHalf>::col(0, 0);
#pragma unroll
      for (int t = 0; t < Acc<kHalf>::kTiles; ++t)
        *reinterpret_cast<uint32_t*>(out + 8 * t) = pack2<E>(acc.c[t][2 * h], acc.c[t][2 * h + 1]);
    }
  }

  // dq or dk of this value head out: fp32 per value head for the GVA sums (finish pass), or (direct)
  // the op's gradient, after the l2norm backward with the normalised rows y and inverse norms rstd.
  // Called by every thread (the l2norm's row sums meet in shared memory).
  __device__ void store_grad(Acc<kHalf>& acc, const Rows& y, const RowTensor& rstd, const RowTensor& ws,
                             const RowTensor& out, int n0) {
    if (!a.direct) return store_f32(acc, ws, n0);
    if (rstd.ptr) {
      const int lane = threadIdx.x % 32;
      float dot[2] = {0.f, 0.f};
#pragma unroll
      for (int t = 0; t < Acc<kHalf>::kTiles; ++t)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float2 yy = tiles::load2<E>(y, row(2 * hh), n0 + Acc<kHalf>::col(t, 0));
          dot[hh] += acc.c[t][2 * hh] * yy.x + acc.c[t][2 * hh + 1] * yy.y;
        }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        dot[hh] = tiles::quad_sum(dot[hh]);
        if (lane % 4 == 0) vec.row_dot[side][row(2 * hh)] = dot[hh];
      }
      __syncthreads();
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = row(2 * hh);
        const float d = vec.row_dot[0][r] + vec.row_dot[1][r];
        const float rs = r < valid ? static_cast<const float*>(rstd.ptr)[it.row(rstd, t0() + r, it.h)] : 0.f;
#pragma unroll
        for (int t = 0; t < Acc<kHalf>::kTiles; ++t) {
          const float2 yy = tiles::load2<E>(y, r, n0 + Acc<kHalf>::col(t, 0));
          acc.c[t][2 * hh] = rs * (acc.c[t][2 * hh] - yy.x * d);
          acc.c[t][2 * hh + 1] = rs * (acc.c[t][2 * hh + 1] - yy.y * d);
        }
      }
      __syncthreads();  // row_dot is read before the next call rewrites it
    }
    store_16(acc, out, n0, it.h);
  }

  // Step 1: dv_loc [64, D] = scale (tril(Q K^T) Gamma)^T do.
  __device__ void dv_local() {
    const Rows q = rows(L::kQ), k = rows(L::kK), dout = rows(L::kDo);
    const Square at = square(L::kDvlSquare);
    load_rows(q, static_cast<const E*>(a.q.ptr), a.q, it, it.h, j, valid, a.vec16);
    load_rows(k, static_cast<const E*>(a.k.ptr), a.k, it, it.h, j, valid, a.vec16);
    load_rows(dout, static_cast<const E*>(a.dout.ptr), a.dout, it, it.hv, j, valid, a.vec16);
    cp_async_commit();
    store_row_values(load_row_values(a, it, j, valid));
    cp_async_wait<0>();
    __syncthreads();
    {  // A^T [64, 64] = K Q^T, entry (j, i) kept for i >= j, times scale exp(gamma_i - gamma_j)
      Acc<32> s;
      s.zero();
      tiles::mma<E, kD, kRow, kRow>(s, k, m0, q, 32 * side);
#pragma unroll
      for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = row(e), c = 32 * side + Acc<32>::col(t, e);
          s.c[t][e] = c >= r ? a.scale * ex2(vec.gamma[c] - vec.gamma[r]) * s.c[t][e] : 0.f;
        }
      tiles::store<E>(s, at, m0, 32 * side);
    }
    __syncthreads();
    Acc<kHalf> o;
    o.zero();
    tiles::mma<E, 64, kRow, kTr>(o, at, m0, dout, kHalf * side);
    store_16(o, a.dv_local, kHalf * side, it.hv);
  }

  __device__ void gradients(bool has_next, const BwdItem& next, RowValues& row_values);
};

// Steps 3 and 4 (spec/gdn.md), in the order of the products below. On entry this item's early
// operands (load_early_operands) are the one cp.async group in flight and row_values holds its
// RowValues; the next item's (if there is one) are issued once this one no longer reads them.
template <class E, int kD>
__device__ void ChunkBwd<E, kD>::gradients(bool has_next, const BwdItem& next, RowValues& row_values) {
  const Rows q = rows(L::kQ), k = rows(L::kK), v = rows(L::kV), dout = rows(L::kDo), vn = rows(L::kVn),
             dv2 = rows(L::kDv2), dw = rows(L::kDw);
  const typename L::State h{base + uint32_t(L::kH)}, dh{base + uint32_t(L::kDh)};
  const Square tm = square(L::kT), sq0 = square(L::kSq0), sq1 = square(L::kSq1);
  const int lane = threadIdx.x % 32, n0 = kHalf * side, c0 = 32 * side;
  // The late operands, read until the end of the item: a second group.
  load_rows(dv2, static_cast<const E*>(a.dv2.ptr), a.dv2, it, it.hv, j, valid, true);
  load_rows(k, static_cast<const E*>(a.k.ptr), a.k, it, it.h, j, valid, a.vec16);
  load_rows(q, static_cast<const E*>(a.q.ptr), a.q, it, it.h, j, valid, a.vec16);
  load_rows(v, static_cast<const E*>(a.v.ptr), a.v, it, it.hv, j, valid, a.vec16);
  load_rows(tm, static_cast<const E*>(a.tmat.ptr), a.tmat, it, it.hv, j, valid, true);
  cp_async_commit();
  store_row_values(row_values);  // the previous item's last reads of gamma, beta are behind a barrier
  cp_async_wait<1>();
  __syncthreads();  // H, dh, do, v_new

  float row_dgam[2] = {0.f, 0.f}, row_dbeta[2] = {0.f, 0.f};  // rows row(0), row(2)
  float last = 0.f;  // this thread's share of dgamma_last's extra terms

  // While the late operands land: dq = do H^T, dki = v_new dh^T, dP = do v_new^T (scaled and
  // masked below), and sum(H * dh) over the whole state (a share per thread).
  Acc<kHalf> dq, dk;
  Acc<32> p;
  dq.zero();
  dk.zero();
  p.zero();
  tiles::mma<E, kD, kRow, kRow>(dq, dout, m0, h, n0);
  tiles::mma<E, kD, kRow, kRow>(dk, vn, m0, dh, n0);
  tiles::mma<E, kD, kRow, kRow>(p, dout, m0, vn, c0);
  // Thread t: columns 2 (t % (kD / 2)) and + 1 of rows t / (kD / 2) + kRowStep i, i.e. the
  // pairs t, t + 256, ... in the same order as a strided loop, with constant address steps.
  constexpr int kPairs = kD / 2, kRowStep = kChunkBwdThreads / kPairs;
  const int r0 = threadIdx.x / kPairs, cc = 2 * (threadIdx.x % kPairs);
  float h_dh = 0.f;
#pragma unroll 4  // fully unrolled, the loads are hoisted: 255 registers and spills at D = 128
  for (int i = 0; i < kD / kRowStep; ++i) {
    const float2 x = tiles::load2<E>(h, r0 + i * kRowStep, cc), y = tiles::load2<E>(dh, r0 + i * kRowStep, cc);
    h_dh += x.x * y.x + x.y * y.y;
  }
  cp_async_wait<0>();
  __syncthreads();  // dv2, q, k, v, T; gamma, beta
  exponentials();

  // dw = -dv2 H^T (to shared memory for the WY part).
  {
    Acc<kHalf> x;
    x.zero();
    tiles::mma<E, kD, kRow, kRow>(x, dv2, m0, h, n0);
#pragma unroll
    for (int t = 0; t < Acc<kHalf>::kTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) x.c[t][e] = -x.c[t][e];
    tiles::store<E>(x, dw, m0, n0);
  }
  __syncthreads();  // exp(gamma)
  // dq = scale diag(exp(gamma)) do H^T ; dk = dki = diag(exp(gamma_last - gamma)) v_new dh^T.
#pragma unroll
  for (int t = 0; t < Acc<kHalf>::kTiles; ++t)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row(2 * hh), c = n0 + Acc<kHalf>::col(t, 0);
      const float fq = a.scale * vec.eg[r], fk = vec.egl[r];
      const float2 kk = tiles::load2<E>(k, r, c);
      dq.c[t][2 * hh] *= fq;
      dq.c[t][2 * hh + 1] *= fq;
      dk.c[t][2 * hh] *= fk;
      dk.c[t][2 * hh + 1] *= fk;
      last += dk.c[t][2 * hh] * kk.x + dk.c[t][2 * hh + 1] * kk.y;  // sum(dki * K)
    }
  // dP = scale tril(do v_new^T) Gamma [64, 64] -> sq0.
#pragma unroll
  for (int t = 0; t < 4; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = row(e), c = c0 + Acc<32>::col(t, e);
      p.c[t][e] = c <= r ? a.scale * ex2(vec.gamma[r] - vec.gamma[c]) * p.c[t][e] : 0.f;
    }
  tiles::store<E>(p, sq0, m0, c0);
  last += vec.eg[63] * h_dh;
  __syncthreads();  // dw, dP complete; H, dh, do, v_new dead
  if (has_next) row_values = load_early_operands<E, kD>(a, next, base);

  // dq += dP K ; dk += dP^T Q; then dgamma_r = sum(dq q) - sum(dk k) and dq is done.
  tiles::mma<E, 64, kRow, kTr>(dq, sq0, m0, k, n0);
  tiles::mma<E, 64, kTr, kTr>(dk, sq0, m0, q, n0);
#pragma unroll
  for (int t = 0; t < Acc<kHalf>::kTiles; ++t)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row(2 * hh), c = n0 + Acc<kHalf>::col(t, 0);
      const float2 qq = tiles::load2<E>(q, r, c), kk = tiles::load2<E>(k, r, c);
      row_dgam[hh] += dq.c[t][2 * hh] * qq.x + dq.c[t][2 * hh + 1] * qq.y - dk.c[t][2 * hh] * kk.x - dk.c[t][2 * hh + 1] * kk.y;
    }
  store_grad(dq, q, a.rstd_q, a.dq, a.dq_out, n0);

  // WY part. dkbg = T^T dw: dk += diag(beta exp(gamma)) dkbg; dbeta, dgamma += its row dots with K.
  {
    Acc<kHalf> y;
    y.zero();
    tiles::mma<E, 64, kTr, kTr>(y, tm, m0, dw, n0);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row(2 * hh);
      const float be = vec.beta[r] * vec.eg[r];
      float s = 0.f;
#pragma unroll
      for (int t = 0; t < Acc<kHalf>::kTiles; ++t) {
        const float2 kk = tiles::load2<E>(k, r, n0 + Acc<kHalf>::col(t, 0));
        s += y.c[t][2 * hh] * kk.x + y.c[t][2 * hh + 1] * kk.y;
        dk.c[t][2 * hh] += be * y.c[t][2 * hh];
        dk.c[t][2 * hh + 1] += be * y.c[t][2 * hh + 1];
      }
      row_dbeta[hh] += vec.eg[r] * s;
      row_dgam[hh] += be * s;
    }
    // dvb = T^T dv2: dv = diag(beta) dvb (done), dbeta += rowsum(dvb V).
    y.zero();
    tiles::mma<E, 64, kTr, kTr>(y, tm, m0, dv2, n0);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row(2 * hh);
      float s = 0.f;
#pragma unroll
      for (int t = 0; t < Acc<kHalf>::kTiles; ++t) {
        const float2 vv = tiles::load2<E>(v, r, n0 + Acc<kHalf>::col(t, 0));
        s += y.c[t][2 * hh] * vv.x + y.c[t][2 * hh + 1] * vv.y;
        y.c[t][2 * hh] *= vec.beta[r];
        y.c[t][2 * hh + 1] *= vec.beta[r];
      }
      row_dbeta[hh] += s;
    }
    store_16(y, a.dv, n0, it.hv);
  }
  // dT = dw kbg^T + dv2 vb^T, strictly lower: dT_ij = beta_j (exp(gamma_j) (dw K^T)_ij + (dv2 V^T)_ij).
  {
    Acc<32> x1, x2;
    x1.zero();
    x2.zero();
    tiles::mma<E, kD, kRow, kRow>(x1, dw, m0, k, c0);
    tiles::mma<E, kD, kRow, kRow>(x2, dv2, m0, v, c0);
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = row(e), c = c0 + Acc<32>::col(t, e);
        x1.c[t][e] = c < r ? vec.beta[c] * (vec.eg[c] * x1.c[t][e] + x2.c[t][e]) : 0.f;
      }
    tiles::store<E>(x1, sq1, m0, c0);
  }
  __syncthreads();  // dT complete; dP's last reads done
  {  // T^T dT -> sq0
    Acc<32> x;
    x.zero();
    tiles::mma<E, 64, kTr, kTr>(x, tm, m0, sq1, c0);
    tiles::store<E>(x, sq0, m0, c0);
  }
  __syncthreads();
  // dL = strict_lower(-(T^T dT) T^T); M = dL Gamma; Z = M * (K K^T):
  // dbeta_i += sum_j Z_ij ; dgamma_i += beta_i sum_j Z_ij ; dgamma_j -= sum_i beta_i Z_ij;
  // MB = diag(beta) M -> sq1 for dk += MB K + MB^T K.
  {
    Acc<32> dl, kk;
    dl.zero();
    kk.zero();
    tiles::mma<E, 64, kRow, kRow>(dl, sq0, m0, tm, c0);
    tiles::mma<E, kD, kRow, kRow>(kk, k, m0, k, c0);
    float col[4][2] = {};
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = row(e), c = c0 + Acc<32>::col(t, e);
        const float m = c < r ? -dl.c[t][e] * ex2(vec.gamma[r] - vec.gamma[c]) : 0.f;
        const float z = m * kk.c[t][e], b = vec.beta[r];
        row_dbeta[e / 2] += z;
        row_dgam[e / 2] += b * z;
        col[t][e % 2] += b * z;
        dl.c[t][e] = b * m;
      }
    tiles::store<E>(dl, sq1, m0, c0);
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float s = tiles::column_sum(col[t][e]);
        if (lane < 4) vec.col_dgam[warp % 4][c0 + Acc<32>::col(t, e)] = s;
      }
  }
  __syncthreads();
  tiles::mma<E, 64, kRow, kTr>(dk, sq1, m0, k, n0);
  tiles::mma<E, 64, kTr, kTr>(dk, sq1, m0, k, n0);
  store_grad(dk, k, a.rstd_k, a.dk, a.dk_out, n0);

  // Row and chunk sums, then dg = the in-chunk reverse cumsum of dgamma.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float dgam = tiles::quad_sum(row_dgam[hh]), dbeta = tiles::quad_sum(row_dbeta[hh]);
    if (lane % 4 == 0) {
      vec.row_dgam[side][row(2 * hh)] = dgam;
      vec.row_dbeta[side][row(2 * hh)] = dbeta;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) last += __shfl_xor_sync(0xffffffff, last, o);
  if (lane == 0) vec.last[warp] = last;
  __syncthreads();
  if (warp == 0) {
    float g2[2], b2[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * lane + e;
      float s = vec.row_dgam[0][r] + vec.row_dgam[1][r] - vec.col_dgam[0][r] - vec.col_dgam[1][r] - vec.col_dgam[2][r] -
                vec.col_dgam[3][r];
      if (r == valid - 1)
        for (int w = 0; w < 8; ++w) s += vec.last[w];
      g2[e] = r < valid ? s : 0.f;
      b2[e] = vec.row_dbeta[0][r] + vec.row_dbeta[1][r];
    }
    // Reverse inclusive scan over rows 63 .. 0 (lane 31 holds rows 62, 63).
    const float pair = g2[0] + g2[1];
    float incl = pair;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float x = __shfl_down_sync(0xffffffff, incl, o);
      if (lane + o < 32) incl += x;
    }
    const float dg[2] = {incl, incl - g2[0]};
    auto* dg_out = static_cast<float*>(a.dg.ptr);
    auto* dbeta_out = static_cast<float*>(a.dbeta.ptr);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * lane + e;
      if (r < valid) {
        dg_out[it.row(a.dg, t0() + r, it.hv)] = dg[e];
        dbeta_out[it.row(a.dbeta, t0() + r, it.hv)] = b2[e];
      }
    }
  }
}

template <class E, int kD>
__global__ void __launch_bounds__(kChunkBwdThreads, 2) gdn_chunk_dv_local_kernel(CUTE_GRID_CONSTANT const ChunkBwdArgs a) {
  const ChunkSlot slot(a, blockIdx.x);
  if (!slot.live) return;
  const WorkItem it(a, slot.n, static_cast<int>(blockIdx.y), 0);
  auto& vec = *reinterpret_cast<ChunkBwdVectors*>(gdn_chunk_smem + ChunkBwdLayout<kD>::kDvlVec);
  ChunkBwd<E, kD>{a, it, slot.j, it.valid_rows(slot.j), vec}.dv_local();
}

// Persistent: CTA c takes items c, c + gridDim.x, ... of slots * HV (slots past a sequence's last
// chunk skipped), each one's early operands loaded during the previous item. Each item's slot is
// found once (with varlen a bisection over cu_seqlens) and handed on.
template <class E, int kD>
__global__ void __launch_bounds__(kChunkBwdThreads, 1) gdn_chunk_bwd_kernel(CUTE_GRID_CONSTANT const ChunkBwdArgs a, int64_t items) {
  auto& vec = *reinterpret_cast<ChunkBwdVectors*>(gdn_chunk_smem + ChunkBwdLayout<kD>::kVec);
  // The first live item at or after i (stepping by the grid) into bi; items when there is none.
  auto live_from = [&](int64_t i, BwdItem& bi) {
    for (; i < items; i += gridDim.x) {
      bi = BwdItem(a, i);
      if (bi.slot.live) break;
    }
    return i;
  };
  BwdItem cur, next;
  int64_t item = live_from(blockIdx.x, cur);
  RowValues row_values;
  if (item < items) row_values = load_early_operands<E, kD>(a, cur, static_cast<uint32_t>(__cvta_generic_to_shared(gdn_chunk_smem)));
  while (item < items) {
    const int64_t next_item = live_from(item + gridDim.x, next);
    const WorkItem it(a, cur.slot.n, cur.hv, 0);
    ChunkBwd<E, kD>{a, it, cur.slot.j, it.valid_rows(cur.slot.j), vec}.gradients(next_item < items, next, row_values);
    item = next_item;
    cur = next;
  }
}

}  // namespace attnkit::cuda::gdn
