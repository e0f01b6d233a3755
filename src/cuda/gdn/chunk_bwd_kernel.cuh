// src/cuda/gdn/chunk_bwd_kernel.cuh — the chunked backward's two per-chunk kernels (spec/gdn.md,
// Backward), CTAs of two warpgroups on (chunk, value head) items:
//   dv_local: dv_loc = scale (tril(Q K^T) Gamma)^T do                              (step 1)
//             one CTA per item, every item at once;
//   gradient: steps 3 and 4 from the chunk's start state H, dh (bwd_dhu's gradient of its end
//             state), v_new, dv2 and T0 -> dq, dk (per value head), dv, dbeta, dg; persistent
//             CTAs (one per SM, shared memory allows no more) that load the next item's H, dh,
//             do and v_new while the current one computes (they are dead half way through).
// Every product is a warpgroup GEMM (WGMMA) over swizzled 16-bit tiles in shared memory, each
// read as X or X^T as the product needs (chunk_bwd_tiles.cuh); warpgroup w owns columns w N / 2 ..
// of every [64, N] product, its warp w % 4 rows 16 (w % 4) .. + 16: the layout the epilogues'
// masks, row sums and column sums are written for. fp32 accumulators in registers.
//
// Sums over a row or a column (dbeta, dgamma) are reduced by shuffles and written once per
// (warp, row): no float atomics, so the gradients are the same bits run after run.
#pragma once
#include <type_traits>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/gdn/chunk_bwd_load.cuh"

namespace attnkit::cuda::gdn {

template <class E, int kD>
struct NextItem;  // below: a persistent CTA's next item, its slot record's load in flight

template <class E, int kD>
struct ChunkBwd {
  using L = ChunkBwdLayout<kD>;
  using S = ChunkBwdTiles<E, kD>;
  using Rows = typename S::Rows;
  using Square = typename S::Square;
  static constexpr int kHalf = kD / 2;  // a warpgroup's columns of a [64, D] product
  static constexpr int kRowPairBarrier = 1;  // named barriers 1..4: warps w and w + 4 (the same rows)
  using RowAcc = tiles::Acc<E, kD>;     // [64, D]: kD / 4 values a thread
  using SqAcc = tiles::Acc<E, 64>;      // [64, 64]: 16

  const ChunkBwdArgs& a;
  const WorkItem& it;
  int j, valid;
  ChunkBwdVectors& vec;  // in shared memory, after the tiles
  int warp = threadIdx.x / 32;
  int side = tiles::uniform_warpgroup();  // which column half

  __device__ int64_t t0() const { return int64_t(j) * 64; }
  // Accumulator element i's row and column (of a [64, D] or [64, 64] product).
  __device__ int row(int i) const { return tiles::acc_row(threadIdx.x, i); }
  __device__ int col(int i) const { return tiles::acc_col<kD>(threadIdx.x, i); }
  __device__ int sq_col(int i) const { return tiles::acc_col<64>(threadIdx.x, i); }

  // gamma, beta (sigmoid applied), the inverse norms (when loaded), the fold factors (gradients()),
  // exp(gamma), exp(gamma_last - gamma): threads 0..63, each from its own row's values (gamma_last
  // loaded by each), so that no barrier is needed between writing gamma and its exponentials.
  __device__ void store_row_values(const RowValues& x) {
    const int r = threadIdx.x;
    if (r < 64) {
      vec.gamma[r] = x.gamma;
      const float beta = a.beta.data.from_bits(x.beta_bits);
      vec.beta[r] = r < valid && a.beta_logit ? sigmoid(beta) : beta;
      vec.inv_norm[0][r] = x.rstd_q;
      vec.inv_norm[1][r] = x.rstd_k;
      const float fq = a.fold_norms ? x.rstd_q : 1.f, fk = a.fold_norms ? x.rstd_k : 1.f;
      const float log_fq = a.fold_norms ? __log2f(fq) : 0.f, log_fk = a.fold_norms ? __log2f(fk) : 0.f;
      vec.fold[0][r] = fq;
      vec.fold[1][r] = fk;
      vec.g_fq[r] = x.gamma + log_fq;
      vec.g_fk[r] = x.gamma + log_fk;
      vec.g_over_fk[r] = x.gamma - log_fk;
      const float eg = ex2(x.gamma);
      vec.eg[r] = eg;
      vec.eg_fk[r] = eg * fk;
      vec.egl[r] = ex2(x.gamma_last - x.gamma);
    }
  }

  // acc's live rows times 1 / f (the rows' fold factors `f`) -> fp32 [rows, HV, D] (dq, dk). Each of
  // the thread's two rows' address is worked out once; its 8-column groups are 8 apart.
  __device__ void store_f32(const RowAcc& acc, const RowTensor& x, const float* f) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row(2 * h) >= valid) continue;
      const float u = 1.f / f[row(2 * h)];  // live rows: f > 0
      float* out = static_cast<float*>(x.ptr) + it.row(x, t0() + row(2 * h), it.hv) + col(0);
#pragma unroll
      for (int t = 0; t < kD / 16; ++t)
        *reinterpret_cast<float2*>(out + 8 * t) = make_float2(u * acc(4 * t + 2 * h), u * acc(4 * t + 2 * h + 1));
    }
  }
  // acc's live rows -> 16-bit [B, T, heads, D] of `head` (dv, dq, dk). Where x's rows
  // are 16-byte aligned, by 16-byte pieces (store_16_pieces).
  __device__ void store_16(const RowAcc& acc, const RowTensor& x, int head) const {
    const uint64_t bytes = uint64_t(x.sb | x.st | x.sh) * sizeof(E);
    if ((reinterpret_cast<uintptr_t>(x.ptr) | bytes) % 16 == 0) return store_16_pieces(acc, x, head);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row(2 * h) >= valid) continue;
      E* out = static_cast<E*>(x.ptr) + it.row(x, t0() + row(2 * h), head) + col(0);
#pragma unroll
      for (int t = 0; t < kD / 16; ++t)
        *reinterpret_cast<uint32_t*>(out + 8 * t) = pack2<E>(acc(4 * t + 2 * h), acc(4 * t + 2 * h + 1));
    }
  }

  // The same by 16-byte pieces. In a row, lane q of a quad holds the pair at columns 8t + 2q of
  // every 8-column group t of the warpgroup's half; a quad transpose per run of four groups gives
  // lane q group 4g + q whole (one 16-byte store for four 4-byte ones). Why: ncu at B4 put ~9% of
  // the kernel's stall samples on the 4-byte stores (LSU throttle) and on the next row address
  // waiting for their source registers; each 32-byte sector was written by two half stores. Every
  // row is transposed before the first store (a store holds its source registers until read).
  __device__ void store_16_pieces(const RowAcc& acc, const RowTensor& x, int head) const {
    constexpr int kRuns = kD / 64;  // runs of four 8-column groups in a half row (kD / 2 columns)
    uint32_t m[2][kRuns][4];        // [row half h][run g][lane q's group 4g + q, by pairs]
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int g = 0; g < kRuns; ++g) {
#pragma unroll
        for (int c = 0; c < 4; ++c) m[h][g][c] = pack2<E>(acc(4 * (4 * g + c) + 2 * h), acc(4 * (4 * g + c) + 2 * h + 1));
        attn::quad_transpose(m[h][g]);
      }
    const int q = threadIdx.x % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row(2 * h) >= valid) continue;
      E* half_row = static_cast<E*>(x.ptr) + it.row(x, t0() + row(2 * h), head) + col(0) - 2 * q;
#pragma unroll
      for (int g = 0; g < kRuns; ++g)
        *reinterpret_cast<uint4*>(half_row + 8 * (4 * g + q)) = make_uint4(m[h][g][0], m[h][g][1], m[h][g][2], m[h][g][3]);
    }
  }

  // dq (which 0) or dk (1) of this value head out: fp32 per value head for the GVA sums (finish
  // pass), or (direct) the op's gradient, after the l2norm backward with the inverse norms rs in
  // vec.inv_norm[which] (RowValues). acc holds f g, g the gradient of the normalised rows and f
  // their fold factors (vec.fold: gradients()); y the rows as landed, y_n = f y (fold: raw rows,
  // f = rs; else normalised, f = 1). So y_n . g = y . acc =: d, and the l2norm backward
  // rs (g - y_n (y_n . g)) is acc - rs^2 y d (fold) or rs (acc - y d). Called by every thread: a
  // row's two column halves (warps w and w + 4) add their l2norm dots in vec.row_dot[which], behind a
  // barrier of that warp pair only. Why not __syncthreads: ncu at B4 put 8.8% of the kernel's
  // stall samples on this exchange's CTA barrier, warps waiting for others that hold none of
  // their rows; row_dot per `which` drops the second barrier that kept the dk call's writes
  // behind the dq call's reads. y's pairs stay in registers across the exchange (16-bit, kD / 4 a
  // thread) rather than being read again after it.
  __device__ void store_grad(RowAcc& acc, const Rows& y, int which, const RowTensor& ws, const RowTensor& out) {
    if (!a.direct) return store_f32(acc, ws, vec.fold[which]);
    if (a.rstd_q.ptr) {
      const int lane = threadIdx.x % 32;
      float dot[2] = {0.f, 0.f};
      uint32_t y_pairs[size(RowAcc{}) / 2];
#pragma unroll
      for (int i = 0; i < size(acc); i += 2) {
        y_pairs[i / 2] = tiles::load_raw2(y, i);
        const float2 yy = tiles::widen2<E>(y_pairs[i / 2]);
        dot[i / 2 % 2] += acc(i) * yy.x + acc(i + 1) * yy.y;
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        dot[hh] = tiles::quad_sum(dot[hh]);
        if (lane % 4 == 0) vec.row_dot[which][side][row(2 * hh)] = dot[hh];
      }
      cutlass::arch::NamedBarrier::sync(64, kRowPairBarrier + warp % 4);
      float d[2], rs[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = row(2 * hh);
        const float inv = vec.inv_norm[which][r];  // 0 past the end
        d[hh] = vec.row_dot[which][0][r] + vec.row_dot[which][1][r];
        if (a.fold_norms) d[hh] *= inv * inv;
        rs[hh] = a.fold_norms ? 1.f : inv;
      }
#pragma unroll
      for (int i = 0; i < size(acc); i += 2) {
        const int hh = i / 2 % 2;
        const float2 yy = tiles::widen2<E>(y_pairs[i / 2]);
        acc(i) = rs[hh] * (acc(i) - yy.x * d[hh]);
        acc(i + 1) = rs[hh] * (acc(i + 1) - yy.y * d[hh]);
      }
    }
    store_16(acc, out, it.h);
  }

  // Q's and K's landed rows times their inverse norms (vec.inv_norm, visible to every thread), in
  // place — l2norm_row's multiply, so qn / kn's bits — by the threads of a row's 16-byte pieces
  // (PieceWalk); `out`: the normalised rows also written to qn, kn (normalize_qk's first value head
  // of each group). With fold_norms the dv_local kernels run it on the forward's kept inverse norms
  // (the gradient kernel folds them into its products instead: gradients()).
  __device__ void scale_qk_rows(const Rows& q, const Rows& k, bool out) const {
    using Piece = cutlass::Array<E, 8>;  // 16 bytes: contiguous in the swizzled tile
    using W = PieceWalk<kD>;
    const W w;
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const Rows m = which ? k : q;
      const RowTensor& xn = which ? a.kn : a.qn;
#pragma unroll
      for (int i = 0; i < 64 / W::kStep; ++i) {
        const int r = w.r + i * W::kStep;
        const float inv = vec.inv_norm[which][r];
        const uint4 raw = ld_shared_v4(m.at(r, w.c));
        Piece p = reinterpret_cast<const Piece&>(raw);
#pragma unroll
        for (int e = 0; e < 8; ++e) p[e] = E(float(p[e]) * inv);
        st_shared(m.at(r, w.c), reinterpret_cast<const uint4&>(p));
        if (out && r < valid)
          *reinterpret_cast<uint4*>(static_cast<E*>(xn.ptr) + it.row(xn, t0() + r, it.h) + w.c) = reinterpret_cast<const uint4&>(p);
      }
    }
  }

  // The op's l2norm, done here once for every later kernel (a.normalize): Q's and K's raw rows
  // normalised in place and written out as qn, kn with their inverse norms, by the first value
  // head of each group. The inverse norms by the forward's l2_inverse_norm (warpgroup 0 Q's rows,
  // 1 K's, two threads a row: the forward's factor bits); the rows then rescaled by the threads
  // that loaded them (PieceWalk: a row's 16-byte pieces on adjacent threads), so each row leaves
  // in one coalesced run.
  __device__ void normalize_qk(const Rows& q, const Rows& k) const {
    {
      const int r = threadIdx.x % 128 / 2;
      const Rows m{side ? k.off : q.off};  // by value: a choice of references went through the stack
      const float inv = l2_inverse_norm<kD, 2>(m, r, threadIdx.x % 2);
      if (threadIdx.x % 2 == 0) vec.inv_norm[side][r] = inv;
    }
    __syncthreads();
    const bool out = it.hv % (a.HV / a.H) == 0;
    scale_qk_rows(q, k, out);
    const int r = threadIdx.x % 64, which = threadIdx.x / 64;
    if (out && which < 2 && r < valid) {
      const RowTensor& rstd = which ? a.rstd_k : a.rstd_q;
      static_cast<float*>(rstd.ptr)[it.row(rstd, t0() + r, it.h)] = vec.inv_norm[which][r];
    }
  }

  // Step 1: dv_loc [64, D] = scale (tril(Q K^T) Gamma)^T do.
  // One item by cp.async copies (the one-item kernel, for rows not 16-byte aligned).
  __device__ void dv_local() {
    const Rows q = S::rows(L::kQ), k = S::rows(L::kK), dout = S::rows(L::kDo);
    load_rows(q, static_cast<const E*>(a.q.ptr), a.q, it, it.h, j, valid, a.vec16);
    load_rows(k, static_cast<const E*>(a.k.ptr), a.k, it, it.h, j, valid, a.vec16);
    load_rows(dout, static_cast<const E*>(a.dout.ptr), a.dout, it, it.hv, j, valid, a.vec16);
    cp_async_commit();
    store_row_values(load_row_values(a, it, j, valid, a.fold_norms));
    copies_landed<0>();
    __syncthreads();
    dv_local(q, k, dout, S::square(L::kDvlSquare));
  }
  // The item's product from its landed (and visible) Q, K, do tiles and row values (vec); `at` a
  // [64, 64] scratch tile. Q's tile is overwritten with the result on its way out.
  __device__ void dv_local(const Rows& q, const Rows& k, const Rows& dout, const Square& at) {
    if (a.normalize || a.fold_norms) {
      if (a.normalize) normalize_qk(q, k);
      else scale_qk_rows(q, k, false);
      cutlass::arch::fence_view_async_shared();  // the rewritten rows, before WGMMA reads them
      __syncthreads();
    }
    {  // A^T [64, 64] = K Q^T, entry (j, i) kept for i >= j, times scale exp(gamma_i - gamma_j)
      SqAcc s;
      tiles::gemm<true>(s, k.k_major(), q.k_major(), side);
      warpgroup_wait<0>();
      tiles::store<E>(s, at, [&](int i, float x) {
        const int r = row(i), c = sq_col(i);
        return c >= r ? a.scale * ex2(vec.gamma[c] - vec.gamma[r]) * x : 0.f;
      });
    }
    __syncthreads();
    RowAcc o;
    tiles::gemm<true>(o, at.k_major(), dout.mn_major(), side);
    warpgroup_wait<0>();
    // Out through Q's tile (dead since K Q^T was waited for), a row's 16-byte pieces on adjacent
    // threads: the accumulator's own 4-byte stores wrote each 32-byte sector in two halves, ncu's
    // 19% excess sectors with L2 84% busy (docs/perf/gdn_chunk_bwd.md). dv_local is the workspace's.
    tiles::store<E>(o, q, [](int, float x) { return x; });
    __syncthreads();
    using W = PieceWalk<kD>;
    const W w;
#pragma unroll
    for (int i = 0; i < 64 / W::kStep; ++i) {
      const int r = w.r + i * W::kStep;
      if (r < valid)
        st_global_v4(static_cast<E*>(a.dv_local.ptr) + it.row(a.dv_local, t0() + r, it.hv) + w.c, ld_shared_v4(q.at(r, w.c)));
    }
  }

  __device__ void gradients(const ChunkBwdParams<E, kD>& params, int phase, int64_t items, NextItem<E, kD>& after,
                            BwdItem& next, RowValues& row_values);
};

// Steps 3 and 4 (spec/gdn.md), in the order of the products below. On entry this item's early
// and late operands (load_early_operands, load_late_operands) are in flight — on the two
// barriers, each completing its phase `phase` (the CTA's item count, mod 2), or as two cp.async
// groups in that order — and row_values holds its RowValues; the next item's are issued once
// this one no longer reads them. Every WGMMA batch is waited for before its accumulator is
// touched. The next item (`after`, NextItem) is found by the time its early operands go out, into
// `next`.
// The products want Q, K as the normalised rows Q_n = diag(fq) Q, K_n = diag(fk) K (vec.fold:
// with fold_norms Q, K land raw and f is the kept inverse norm; else f = 1). Rather than rewrite
// the tiles (a pass over both and one more CTA barrier an item: +5% gradient kernel time), the
// factors ride on the small operands: dq and dk are held as diag(fq) dq, diag(fk) dk, so that
//   dq += dP K_n and dk += dP^T Q_n take sq0 = diag(fq) dP diag(fk) against raw K, Q,
//   dk += MB K_n + MB^T K_n take sq1 = diag(fk) MB diag(fk),
//   dq . q_n = (fq dq) . q and the like need no factor, dw K_n^T takes fk[c] and M's K_n K_n^T
//   fk[r] fk[c], and store_grad takes the held rows as they are.
// The [64, 64] epilogues already scale by exp(gamma_r - gamma_c): their factors go into that
// exponent (vec.g_fq, g_fk, g_over_fk), so no element pays a load or a multiply more. (v1 with the
// factors as multiplies: +34 us at B4, ncu's stall samples +5.7%, gathered in those epilogues.)
template <class E, int kD>
__device__ void ChunkBwd<E, kD>::gradients(const ChunkBwdParams<E, kD>& params, int phase, int64_t items,
                                           NextItem<E, kD>& after, BwdItem& next, RowValues& row_values) {
  const Rows q = S::rows(L::kQ), k = S::rows(L::kK), v = S::rows(L::kV), dout = S::rows(L::kDo), vn = S::rows(L::kVn),
             dv2 = S::rows(L::kDv2), dw = S::rows(L::kDw);
  const typename S::State h = S::h(), dh = S::dh();
  const Square tm = S::square(L::kT), sq0 = S::square(L::kSq0), sq1 = S::square(L::kSq1);
  const int lane = threadIdx.x % 32;
  auto* bars = chunk_bwd_barriers(chunk_bwd_barriers_offset<kD>());
  store_row_values(row_values);  // the previous item's last reads of gamma, beta are behind a barrier
  after.load(params);
  if (params.tma) {
    bars[0].wait(phase);
    if (valid < 64) {  // rows past the sequence's end, read from the next sequence's
      zero_rows_from(dout, valid);
      zero_rows_from(vn, valid);
      cutlass::arch::fence_view_async_shared();
    }
  } else {
    copies_landed<1>();
  }
  // H, dh, do, v_new: each thread's wait on the TMA barrier shows it the boxes' bytes; a CTA
  // barrier is needed only for other threads' writes (zeroed rows, cp.async copies).
  if (!params.tma || valid < 64) __syncthreads();

  float row_dgam[2] = {0.f, 0.f}, row_dbeta[2] = {0.f, 0.f};  // rows row(0), row(2)
  float last = 0.f;  // this thread's share of dgamma_last's extra terms

  // While the late operands land: dq = do H^T, dki = v_new dh^T, dP = do v_new^T (scaled and
  // masked below), and sum(H * dh) over the whole state (16-byte pieces, a share per thread).
  RowAcc dq, dk;
  SqAcc p;
  tiles::gemm<true>(dq, dout.k_major(), h.k_major(), side);
  tiles::gemm<true>(dk, vn.k_major(), dh.k_major(), side);
  tiles::gemm<true>(p, dout.k_major(), vn.k_major(), side);
  float h_dh = 0.f;
  {
    using W = PieceWalk<kD>;
    const W w;
    const uint32_t ph = h.at(w.r, w.c), pd = dh.at(w.r, w.c);
#pragma unroll
    for (int i = 0; i < kD / W::kStep; ++i) {
      const uint32_t step = uint32_t(i * W::kStep * S::State::kRowBytes);
      const uint4 x = ld_shared_v4(ph + step), y = ld_shared_v4(pd + step);
      const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 xx = tiles::widen2<E>(xs[e]), yy = tiles::widen2<E>(ys[e]);
        h_dh += xx.x * yy.x + xx.y * yy.y;
      }
    }
  }
  if (params.tma) {
    bars[1].wait(phase);
    if (valid < 64) {
      zero_rows_from(dv2, valid);
      zero_rows_from(k, valid);
      zero_rows_from(q, valid);
      zero_rows_from(v, valid);
      zero_rows_from(tm, valid);
      cutlass::arch::fence_view_async_shared();
    }
  } else {
    copies_landed<0>();
  }
  __syncthreads();  // dv2, q, k, v, T; gamma, beta and their exponentials

  // dw = -dv2 H^T (the WGMMA negates dv2), in flight while dq, dk and dP are scaled.
  RowAcc x;
  tiles::gemm<true, GMMA::ScaleIn::Neg>(x, dv2.k_major(), h.k_major(), side);
  warpgroup_wait<1>();  // dq, dk, dP
  // dq = scale diag(exp(gamma)) do H^T ; dk = dki = diag(exp(gamma_last - gamma)) v_new dh^T,
  // each held times its rows' fold factors from here on (fq dq, fk dk: see above).
  const float* fold_q = vec.fold[0];
  const float* fold_k = vec.fold[1];
#pragma unroll
  for (int i = 0; i < size(dq); i += 2) {
    const int r = row(i);
    const float fq = a.scale * vec.eg[r] * fold_q[r], fk = vec.egl[r] * fold_k[r];
    const float2 kk = tiles::load2<E>(k, i);
    dq(i) *= fq;
    dq(i + 1) *= fq;
    dk(i) *= fk;
    dk(i + 1) *= fk;
    last += dk(i) * kk.x + dk(i + 1) * kk.y;  // sum(dki * K)
  }
  // dP = scale tril(do v_new^T) Gamma [64, 64] -> sq0 as diag(fq) dP diag(fk).
  tiles::store<E>(p, sq0, [&](int i, float y) {
    const int r = row(i), c = sq_col(i);
    return c <= r ? a.scale * ex2(vec.g_fq[r] - vec.g_over_fk[c]) * y : 0.f;  // fq[r] fk[c] in the exponent
  });
  last += vec.eg[63] * h_dh;
  warpgroup_wait<0>();
  tiles::store<E>(x, dw, [](int, float y) { return y; });  // for the WY part
  __syncthreads();  // dw, dP complete; H, dh, do, v_new dead (their WGMMAs waited for)

  // dq += dP K ; dk += dP^T Q; then dgamma_r = sum(dq q) - sum(dk k) and dq is done. Meanwhile
  // dkbg = T^T dw, and the next item's early operands go out.
  tiles::gemm<false>(dq, sq0.k_major(), k.mn_major(), side);
  tiles::gemm<false>(dk, sq0.mn_major(), q.mn_major(), side);
  RowAcc y;
  tiles::gemm<true>(y, tm.mn_major(), dw.mn_major(), side);
  const bool has_next = after.resolve(params, items, next);  // (its record's load long landed)
  if (has_next) row_values = load_early_operands<E, kD>(params, next);
  warpgroup_wait<1>();  // dq, dk
#pragma unroll
  for (int i = 0; i < size(dq); i += 2) {
    const float2 qq = tiles::load2<E>(q, i), kk = tiles::load2<E>(k, i);
    row_dgam[i / 2 % 2] += dq(i) * qq.x + dq(i + 1) * qq.y - dk(i) * kk.x - dk(i + 1) * kk.y;
  }
  store_grad(dq, q, 0, a.dq, a.dq_out);

  // WY part. dk += diag(beta exp(gamma)) dkbg; dbeta, dgamma += its row dots with K. Meanwhile
  // dvb = T^T dv2 (into dq's registers, dq being done).
  warpgroup_wait<0>();  // dkbg
  RowAcc& dvb = dq;
  tiles::gemm<true>(dvb, tm.mn_major(), dv2.mn_major(), side);
  {
    float s[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < size(y); i += 2) {
      const int r = row(i);
      const float be = vec.beta[r] * vec.eg[r] * fold_k[r];
      const float2 kk = tiles::load2<E>(k, i);
      s[i / 2 % 2] += y(i) * kk.x + y(i + 1) * kk.y;
      dk(i) += be * y(i);
      dk(i + 1) += be * y(i + 1);
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row(2 * hh);
      const float sk = s[hh] * fold_k[r];  // dkbg . k_n
      row_dbeta[hh] += vec.eg[r] * sk;
      row_dgam[hh] += vec.beta[r] * vec.eg[r] * sk;
    }
  }
  // dv = diag(beta) dvb (done), dbeta += rowsum(dvb V). Meanwhile dT's two products:
  // dT = dw kbg^T + dv2 vb^T, strictly lower: dT_ij = beta_j (exp(gamma_j) (dw K^T)_ij + (dv2 V^T)_ij).
  SqAcc x1, x2;
  tiles::gemm<true>(x1, dw.k_major(), k.k_major(), side);
  tiles::gemm<true>(x2, dv2.k_major(), v.k_major(), side);
  warpgroup_wait<2>();  // dvb
#pragma unroll
  for (int i = 0; i < size(dvb); i += 2) {
    const int r = row(i);
    const float2 vv = tiles::load2<E>(v, i);
    row_dbeta[i / 2 % 2] += dvb(i) * vv.x + dvb(i + 1) * vv.y;
    dvb(i) *= vec.beta[r];
    dvb(i + 1) *= vec.beta[r];
  }
  store_16(dvb, a.dv, it.hv);
  warpgroup_wait<0>();  // dw K^T, dv2 V^T
  tiles::store<E>(x1, sq1, [&](int i, float z) {  // z: (dw K^T)_rc, so dw K_n^T's is z fk[c]
    const int r = row(i), c = sq_col(i);
    return c < r ? vec.beta[c] * (vec.eg_fk[c] * z + x2(i)) : 0.f;
  });
  __syncthreads();  // dT complete; dP's last reads done
  // T^T dT -> sq0; K K^T alongside, for below.
  SqAcc kk;
  {
    SqAcc tdt;
    tiles::gemm<true>(tdt, tm.mn_major(), sq1.mn_major(), side);
    tiles::gemm<true>(kk, k.k_major(), k.k_major(), side);
    warpgroup_wait<1>();  // T^T dT
    tiles::store<E>(tdt, sq0, [](int, float z) { return z; });
  }
  __syncthreads();
  // dL = strict_lower(-(T^T dT) T^T); M = dL Gamma; Z = M * (K K^T):
  // dbeta_i += sum_j Z_ij ; dgamma_i += beta_i sum_j Z_ij ; dgamma_j -= sum_i beta_i Z_ij;
  // MB = diag(beta) M -> sq1 for dk += MB K + MB^T K.
  {
    SqAcc dl;
    tiles::gemm<true>(dl, sq0.k_major(), tm.k_major(), side);
    warpgroup_wait<0>();
    float col_sum[4][2] = {};
#pragma unroll
    for (int i = 0; i < size(dl); ++i) {
      const int r = row(i), c = sq_col(i);
      // m fk[r] fk[c]: Z's K_n K_n^T from K K^T, and MB as diag(fk) MB diag(fk) for dk's products
      const float m = c < r ? -dl(i) * ex2(vec.g_fk[r] - vec.g_over_fk[c]) : 0.f;
      const float z = m * kk(i), b = vec.beta[r];
      row_dbeta[i / 2 % 2] += z;
      row_dgam[i / 2 % 2] += b * z;
      col_sum[i / 4][i % 2] += b * z;
      dl(i) = b * m;
    }
    tiles::store<E>(dl, sq1, [](int, float y) { return y; });
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float s = tiles::column_sum(col_sum[t][e]);
        if (lane < 4) vec.col_dgam[warp % 4][sq_col(4 * t + e)] = s;
      }
  }
  __syncthreads();
  tiles::gemm<false>(dk, sq1.k_major(), k.mn_major(), side);
  tiles::gemm<false>(dk, sq1.mn_major(), k.mn_major(), side);
  warpgroup_wait<0>();
  store_grad(dk, k, 1, a.dk, a.dk_out);

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
  __syncthreads();  // every tile read; only vec's sums left
  if (has_next) load_late_operands<E, kD>(params, next, kLateIssuer);
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
  BwdItem item;
  item.set_slot(a, blockIdx.x);
  const ChunkSlot slot = item.slot;
  if (!slot.live) return;
  const WorkItem it(a, slot.n, static_cast<int>(blockIdx.y), 0);
  auto& vec = *reinterpret_cast<ChunkBwdVectors*>(gdn_chunk_smem + ChunkBwdLayout<kD>::kDvlVec);
  ChunkBwd<E, kD>{a, it, slot.j, it.valid_rows(slot.j), vec}.dv_local();
}

// The first live item at or after i (stepping by the grid) into bi; `items` when there is none.
template <class E, int kD>
__device__ int64_t live_item_from(const ChunkBwdParams<E, kD>& p, int64_t i, int64_t items, BwdItem& bi) {
  for (; i < items; i += gridDim.x) {
    bi = p.fast_items ? BwdItem(p.a, static_cast<int>(i), p.by_heads, p.by_seq_chunks) : BwdItem(p.a, i);
    if (bi.slot.live) break;
  }
  return i;
}

// A persistent CTA's next item, found in two steps with the varlen slot table: its slot record's
// load goes out once the current item's row values are stored (load(): those stores wait on their
// own loads' scoreboard, which ptxas may give the record's load too) and is decoded where the item
// first needs the next one (resolve(), at its early operands' issue, after its first products).
// Decoded at once, every warp waited for the record at each item's start (ncu at varlen: 2.3% of
// the gradient kernel's stall samples). Without the table (nothing to wait for) the next item is
// found at the top of the current one, as before.
template <class E, int kD>
struct NextItem {
  int64_t item;  // the candidate, then (once found) the next live item, or `items` past the end
  int4 record;   // the candidate's slot record, while `pending`
  bool pending;
  __device__ NextItem(const ChunkBwdParams<E, kD>& p, int64_t i, int64_t items, BwdItem& bi) : item(i) {
    pending = p.fast_items && p.a.slot_items && i < items;
    if (!pending) item = live_item_from(p, i, items, bi);
  }
  __device__ void load(const ChunkBwdParams<E, kD>& p) {
    if (pending) record = p.a.slot_items[p.by_heads.div(static_cast<int>(item))];
  }
  // The next live item in bi; false past the last.
  __device__ bool resolve(const ChunkBwdParams<E, kD>& p, int64_t items, BwdItem& bi) {
    if (pending) {
      bi.hv = p.by_heads.rem(static_cast<int>(item));
      bi.set_record(record);
      if (bi.slot.live) return true;
      item = live_item_from(p, item + gridDim.x, items, bi);  // past its sequence's last chunk: on by the loads
    }
    return item < items;
  }
};

// dv_local, persistent, where every row is 16-byte aligned (ChunkBwdParams::tma): CTA c takes
// items c, c + gridDim.x, ... (value head fastest, as the gradient kernel), two CTAs an SM. Item n
// computes on stage n % 2 while the next item's rows land in the other (issued once the previous
// item's last reads of it are behind the loop's first barrier); each stage's barrier completes
// every other item, its phase (n / 2) % 2. Why: the one-item kernel waited on its loads at every
// item's start (ncu at B4: ~30% of its stall samples on the copies' and the gates' loads; DRAM
// 73%, twice its floor).
template <class E, int kD>
__global__ void __launch_bounds__(kChunkBwdThreads, 2)
    gdn_chunk_dv_local_tma_kernel(CUTE_GRID_CONSTANT const ChunkBwdParams<E, kD> p, int64_t items) {
  using DL = DvLocalLayout<kD>;
  using S = ChunkBwdTiles<E, kD>;
  const ChunkBwdArgs& a = p.a;
  auto& vec = *reinterpret_cast<ChunkBwdVectors*>(gdn_chunk_smem + DL::kVec);
  auto* bars = chunk_bwd_barriers(DL::kBarriers);
  if (threadIdx.x == 0) {
    bars[0].init(1);
    bars[1].init(1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  BwdItem cur, next;
  int64_t item = live_item_from(p, blockIdx.x, items, cur);
  RowValues row_values;
  if (item < items) row_values = load_dv_local_operands(p, cur, 0);
  for (int n = 0; item < items; ++n) {
    const int stage = n % 2, t = DL::kStageTiles * stage;
    const int64_t next_item = live_item_from(p, item + gridDim.x, items, next);
    __syncthreads();  // the previous item's reads of the other stage (its result's copy out) and of vec
    RowValues next_values;
    if (next_item < items) next_values = load_dv_local_operands(p, next, stage ^ 1);
    const WorkItem it = cur.work(a);
    ChunkBwd<E, kD> c{a, it, cur.slot.j, it.valid_rows(cur.slot.j), vec};
    c.store_row_values(row_values);
    const typename S::Rows q = S::rows(t), k = S::rows(t + 1), dout = S::rows(t + 2);
    bars[stage].wait((n / 2) % 2);
    if (c.valid < 64) {  // rows past the sequence's end, read from the next sequence's
      zero_rows_from(q, c.valid);
      zero_rows_from(k, c.valid);
      zero_rows_from(dout, c.valid);
      cutlass::arch::fence_view_async_shared();
    }
    __syncthreads();  // vec's row values; zeroed rows
    c.dv_local(q, k, dout, S::square(DL::kSquare));
    row_values = next_values;
    item = next_item;
    cur = next;
  }
}

// Persistent: CTA c takes items c, c + gridDim.x, ... of slots * HV (slots past a sequence's last
// chunk skipped), each one's early operands loaded during the previous item. Each item's slot is
// found once (with varlen a bisection over cu_seqlens) and handed on. With TMA, each of the two
// barriers completes once per item: its phase is the CTA's item count mod 2.
template <class E, int kD>
__global__ void __launch_bounds__(kChunkBwdThreads, 1)
    gdn_chunk_bwd_kernel(CUTE_GRID_CONSTANT const ChunkBwdParams<E, kD> p, int64_t items) {
  const ChunkBwdArgs& a = p.a;
  auto& vec = *reinterpret_cast<ChunkBwdVectors*>(gdn_chunk_smem + ChunkBwdLayout<kD>::kVec);
  if (p.tma && threadIdx.x == 0) {
    auto* bars = chunk_bwd_barriers(chunk_bwd_barriers_offset<kD>());
    bars[0].init(1);
    bars[1].init(1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  BwdItem cur, next;
  int64_t item = live_item_from(p, blockIdx.x, items, cur);
  RowValues row_values;
  if (item < items) {
    row_values = load_early_operands<E, kD>(p, cur);
    load_late_operands<E, kD>(p, cur, kLateIssuer);
  }
  for (int phase = 0; item < items; phase ^= 1) {
    NextItem<E, kD> after(p, item + gridDim.x, items, next);
    const WorkItem it = cur.work(a);
    ChunkBwd<E, kD>{a, it, cur.slot.j, it.valid_rows(cur.slot.j), vec}.gradients(p, phase, items, after, next, row_values);
    item = after.item;
    cur = next;
  }
}

}  // namespace attnkit::cuda::gdn
