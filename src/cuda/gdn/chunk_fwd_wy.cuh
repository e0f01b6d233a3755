// src/cuda/gdn/chunk_fwd_wy.cuh — the WY kernel of the chunked forward: one warpgroup per
// (chunk, value head) computes everything about the chunk that does not depend on the state —
// gamma, T0 = (I + L)^-1, w and u (the WY form, spec/gdn.md) — and writes w, u and gamma to the
// workspace for the recurrence kernel.
//
// Every chunk is independent here, so the whole grid runs at once (several CTAs per SM hide each
// other's latency); the recurrence kernel that follows only streams the results. K and V rows come
// by TMA when 16-byte aligned (rows past a sequence's end, read from the next sequence, zeroed once
// landed), else by cp.async (zero-filled); w and u go out by TMA stores from their shared tiles,
// row by row for a tail chunk. Rows past the sequence end get g = beta = 0: their rows of L, w, u
// are exact zeros and are not written. With the in-op l2norm, K's rows are not rewritten: their
// inverse norms scale L and Tw in fp32 (a training forward keeping T also writes q and k
// normalised from here: ChunkFwdArgs::qn). The outputs go into the shared columns of V and K that
// their GEMMs have just read (run()), so the kernel needs ~56 KB and 128 registers: 4 CTAs an SM.
#pragma once
#include <cutlass/arch/barrier.h>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"
#include "src/cuda/gdn/chunk_gates.cuh"
#include "src/cuda/gdn/chunk_fwd_solve.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn {

using attn::acc_as_operand_a_layout;
using attn::convert_into;
using attn::gemm_zero;

// kTma: K and V rows by TMA (a.vec16), else by cp.async. kTPairs (with kTma): instead of w and u,
// the rows of [Tu | Tw] ([C, 2C], 16-bit) into w's workspace, for a recurrence kernel that forms
// w and u itself (chunk_fwd_wu.cuh); V is not read.
template <class T, bool kTma, bool kTPairs = false>
struct WyChunk {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK;
  const WyParams<T>& p;
  const ChunkFwdArgs& a;
  const WorkItem& it;  // the sequence and value head (vb = 0)
  int j;               // the chunk
  int tid;             // 0..127

  static CUTE_DEVICE void sync() { __syncthreads(); }
  CUTE_DEVICE int64_t t0() const { return int64_t(j) * kC; }

  // Warp 0: the chunk's gates (chunk_gates.cuh), then gamma and beta into shared memory and
  // gamma's live rows to the workspace.
  CUTE_DEVICE void load_gates(float (&g)[2], uint32_t (&beta_bits)[2]) const { load_chunk_gates(a, it, j, tid % 32, g, beta_bits); }
  CUTE_DEVICE void scan_gates(float (&g)[2], const uint32_t (&beta_bits)[2], float* gamma, float* beta_out) const {
    finish_chunk_gates(a, it, j, tid % 32, g, beta_bits, gamma, beta_out, static_cast<float*>(a.gamma.ptr));
  }

  // T = (I + L_Gamma)^-1 of the gated L (spec/gdn.md), the backward's: T0 is its ungated twin, and
  // L_Gamma = D L D^-1 with D = diag(exp(gamma)) gives T_rc = T0_rc exp(gamma_r - gamma_c) (r >= c:
  // the exponent is <= 0). Live rows to a.tmat in 16-bit, 8 columns a store. Reads T0 and gamma
  // only, so the operands below are built from T0 without a barrier between. T0's and gamma's 8
  // columns come by 16-byte loads (one at a time they were ~7% of the rerun instantiation's stall
  // samples, ncu at B4).
  CUTE_DEVICE void store_t(const float* sT, const float* gamma) const {
    const int valid = it.valid_rows(j);
    CUTE_UNROLL
    for (int i = 0; i < kC * kC / 8 / 128; ++i) {
      const int piece = tid + 128 * i, r = piece / (kC / 8), c = (piece % (kC / 8)) * 8;
      if (r >= valid) continue;
      const float4 t[2] = {*reinterpret_cast<const float4*>(&sT[r * kLdT + c]), *reinterpret_cast<const float4*>(&sT[r * kLdT + c + 4])};
      const float4 g[2] = {*reinterpret_cast<const float4*>(&gamma[c]), *reinterpret_cast<const float4*>(&gamma[c + 4])};
      const float gamma_r = gamma[r];
      auto at = [](const float4 (&v)[2], int e) { const float4& q = v[e / 4]; return e % 4 == 0 ? q.x : e % 4 == 1 ? q.y : e % 4 == 2 ? q.z : q.w; };
      float x[8];
      CUTE_UNROLL
      for (int e = 0; e < 8; ++e) x[e] = c + e <= r ? at(t, e) * ex2(gamma_r - at(g, e)) : 0.f;
      const uint4 v{pack2<Element>(x[0], x[1]), pack2<Element>(x[2], x[3]), pack2<Element>(x[4], x[5]), pack2<Element>(x[6], x[7])};
      st_global_v4(static_cast<Element*>(a.tmat.ptr) + it.row(a.tmat, t0() + r, it.hv) + c, v);
    }
  }

  // The chunk's K and V rows into shared memory, in two steps so that the gates' loads go out
  // between: issue_rows, then wait_rows (landed and visible to every thread on return).
  using Pieces = ChunkPieces<kDK, typename T::LayoutRowsDK>;
  static CUTE_DEVICE uint32_t at(const Element* x) { return cute::cast_smem_ptr_to_uint(x); }
  CUTE_DEVICE void issue_rows(int valid) const {
    auto& sm = chunk_smem<typename T::WyStorage>();
    if constexpr (kTma) {
      if (tid == 0) {
        sm.rows_landed.init(1);
        cutlass::arch::fence_barrier_init();
        sm.rows_landed.arrive_and_expect_tx((kTPairs ? 1 : 2) * kC * kDK * sizeof(Element));
        uint64_t& bar = reinterpret_cast<uint64_t&>(sm.rows_landed);
        issue_rows_box(p.tma_k, rows_boxes<typename T::LayoutRowsDK>(p.tma_k, p.shape_k, it, it.h, 0, sm.k.data()), j, 0, bar);
        if constexpr (!kTPairs)
          issue_rows_box(p.tma_v, rows_boxes<typename T::LayoutRowsDK>(p.tma_v, p.shape_v, it, it.hv, 0, sm.v.data()), j, 0, bar);
      }
    } else {
      const Pieces pieces(tid, sm.k.data());
      pieces.copy(at(sm.k.data()), static_cast<const Element*>(a.k.ptr), a.k, it, it.h, j, valid, false);
      pieces.copy(at(sm.v.data()), static_cast<const Element*>(a.v.ptr), a.v, it, it.hv, j, valid, false);
      cp_async_commit();
    }
  }
  CUTE_DEVICE void wait_rows(int valid) const {
    auto& sm = chunk_smem<typename T::WyStorage>();
    if constexpr (kTma) {
      sync();  // the barrier's initialisation, before anyone waits on it
      sm.rows_landed.wait(0);
      if (valid < kC) {  // the boxes read on into the next sequence's rows
        const Pieces pieces(tid, sm.k.data());
        pieces.zero_from(at(sm.k.data()), valid);
        if constexpr (!kTPairs) pieces.zero_from(at(sm.v.data()), valid);
      }
    } else {
      cp_async_wait<0>();
    }
  }

  // f(work item, chunk) for the stores at the end. The TMA instantiation reads (n, j) back from
  // shared memory (run() leaves them there) rather than keeping them in registers since the loads,
  // which would crowd the GEMMs' (and spill); the other keeps `it` and an opaque copy of j.
  template <class F>
  CUTE_DEVICE void with_item_again(F&& f) const {
    if constexpr (kTma) {
      auto& sm = chunk_smem<typename T::WyStorage>();
      f(WorkItem(a, sm.seq, it.hv, 0, qk_head_fast(a, it.hv)), sm.chunk);
    } else {
      int jj = j;
      asm volatile("" : "+r"(jj));
      f(it, jj);
    }
  }

  // w's or u's tile (its rows are the chunk's) to the workspace, after every thread's writes to it:
  // a whole chunk by one TMA store (thread 0; tma_store_wait before the CTA exits), a tail chunk
  // row by row (a box would write into the next sequence's rows). The cp.async instantiation
  // stores row by row (fewer registers live).
  template <class Tile>
  CUTE_DEVICE void store_rows(const Tile& sX, const RowTensor& x, const RowsTmaStore<Element, typename T::LayoutRowsDK>& tma,
                              const RowsShape& shape) const {
    with_item_again([&](const WorkItem& w, int jj) {
      const int valid = w.valid_rows(jj);
      if (kTma && valid == kC) {
        if (tid == 0) {
          issue_rows_store(tma, rows_boxes<typename T::LayoutRowsDK>(tma, shape, w, w.hv, 0, raw_pointer_cast(sX.data())), jj);
          tma_store_arrive();
        }
      } else {
        store_chunk_rows<kDK>(sX, static_cast<Element*>(x.ptr), x, w, int64_t(jj) * kC, w.hv, valid, true);
      }
    });
  }

  // Row r's pair of columns (c, c + 1) of both WY operands, in 16 bits, from T0 (sT) and the
  // chunk's gates (gamma_r, exp_gamma_r: row r's): .x = Tu_rc = T0_rc beta_c exp(gamma_r - gamma_c)
  // (only r >= c: above the diagonal T0 is 0 and the exponent could overflow), .y = Tw_rc =
  // T0_rc beta_c n_c exp(gamma_r) (w = Tw K of K's rows as loaded). One function for both so T0
  // and beta are read once where both are wanted; a caller using one half leaves the other dead.
  CUTE_DEVICE uint2 t_pairs(const float* sT, int r, int c, float gamma_r, float exp_gamma_r) const {
    auto& sm = chunk_smem<typename T::WyStorage>();
    const float2 t0 = *reinterpret_cast<const float2*>(&sT[r * kLdT + c]);
    const float2 bc = *reinterpret_cast<const float2*>(&sm.beta[c]);
    const float2 gc = *reinterpret_cast<const float2*>(&sm.gamma[c]);
    const float2 nc = *reinterpret_cast<const float2*>(&sm.knorm[c]);
    return {pack2<Element>(c <= r ? t0.x * bc.x * ex2(gamma_r - gc.x) : 0.f,
                           c + 1 <= r ? t0.y * bc.y * ex2(gamma_r - gc.y) : 0.f),
            pack2<Element>(t0.x * bc.x * nc.x * exp_gamma_r, t0.y * bc.y * nc.y * exp_gamma_r)};
  }

  // kTPairs: Tu and Tw (t_pairs: the values run() would multiply by V and K) side by side as
  // [C, 2C] rows in K's tile (K K^T and K's norms are done with it; V's tile is not in this
  // instantiation's shared memory), then out to w's workspace rows (store_rows). Rows past the
  // sequence end are zeros (beta = 0 there), and are not written.
  template <class Coords>
  CUTE_DEVICE void store_t_pairs(const float* sT, const Coords& cS, int r0, const float (&gamma_r)[2],
                                 const float (&exp_gamma_r)[2]) const {
    static_assert(2 * kC == kDK, "[Tu | Tw] rows fill a [C, DK] tile");
    auto& sm = chunk_smem<typename T::WyStorage>();
    Tensor sTp = make_tensor(make_smem_ptr(sm.k.data()), typename T::LayoutRowsDK{});  // [C, 2C]
    // A batch of pairs first, then their stores: a store's memory clobber would have the gates
    // and T0 re-read after it. (All 16 pairs at once spill at 96 registers.)
    constexpr int kBatch = 8;
    CUTE_UNROLL
    for (int i0 = 0; i0 < size(cS); i0 += 2 * kBatch) {
      uint2 tuw[kBatch];
      CUTE_UNROLL
      for (int b = 0; b < kBatch; ++b) {
        const int r = get<0>(cS(i0 + 2 * b)), c = get<1>(cS(i0 + 2 * b)), h = (r - r0) / 8;
        tuw[b] = t_pairs(sT, r, c, gamma_r[h], exp_gamma_r[h]);
      }
      CUTE_UNROLL
      for (int b = 0; b < kBatch; ++b) {
        const int r = get<0>(cS(i0 + 2 * b)), c = get<1>(cS(i0 + 2 * b));
        st_shared(&sTp(r, c), tuw[b].x);
        st_shared(&sTp(r, kC + c), tuw[b].y);
      }
    }
    cutlass::arch::fence_view_async_shared();  // this thread's writes, before the TMA store reads them
    sync();
    store_rows(sTp, a.w, p.tma_w, p.shape_w);
    if (tid == 0) tma_store_wait<0>();
  }

  // Both runs' start: the chunk's K and V rows in (issue_rows, wait_rows), warp 0's gates loaded
  // while they land and `meanwhile()` (run_from_t's T) between; landed and visible on return.
  template <class F>
  CUTE_DEVICE void land_rows(int valid, float (&g2)[2], uint32_t (&b2)[2], F&& meanwhile) const {
    if (kTma && tid == 0) chunk_smem<typename T::WyStorage>().seq = it.n, chunk_smem<typename T::WyStorage>().chunk = j;
    issue_rows(valid);
    if (tid / 32 == 0) load_gates(g2, b2);  // their latency overlaps the copies'
    meanwhile();
    wait_rows(valid);
    cutlass::arch::fence_view_async_shared();
    sync();
  }

  CUTE_DEVICE void run() {
    auto& sm = chunk_smem<typename T::WyStorage>();
    Tensor sK = make_tensor(make_smem_ptr(sm.k.data()), typename T::LayoutRowsDK{});  // [C, DK]
    const int valid = it.valid_rows(j);
    const int warp = tid / 32;
    float g2[2];
    uint32_t b2[2];
    land_rows(valid, g2, b2, [] {});

    typename T::MmaS mma_s;
    auto thr_s = mma_s.get_thread_slice(tid);
    Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kC>>{}));  // (row, col) per register
    Tensor tKK = partition_fragment_C(mma_s, Shape<Int<kC>, Int<kC>>{});            // fp32 [C, C]: K K^T
    {
      Tensor tA_K = thr_s.partition_fragment_A(sK);
      Tensor tB_K = thr_s.partition_fragment_B(sK);
      gemm_zero<false>(mma_s, tA_K, tB_K, tKK);
    }
    // K's rows stay as loaded: with the in-op l2norm their inverse norms n (2 threads a row; the
    // recurrence's l2_inverse_norm, so the same factors bit for bit) go into L (n_r n_c) and Tw
    // (n_c) in fp32, while the GEMM above runs.
    {
      const float n = a.l2norm ? l2_inverse_norm<kDK, 2>(sK, tid / 2, tid % 2) : 1.f;
      if (tid % 2 == 0) sm.knorm[tid / 2] = n;
    }
    if (warp == 0) scan_gates(g2, b2, sm.gamma, sm.beta);
    warpgroup_wait<0>();
    sync();  // gamma, beta, knorm visible

    // This thread's accumulator rows are r0 and r0 + 8 (h = 0, 1); its columns vary.
    const int r0 = get<0>(cS(0));
    auto half = [&](int i) { return (get<0>(cS(i)) - r0) / 8; };
    const float beta_n_r[2] = {sm.beta[r0] * sm.knorm[r0], sm.beta[r0 + 8] * sm.knorm[r0 + 8]};
    const float gamma_r[2] = {sm.gamma[r0], sm.gamma[r0 + 8]};
    const float exp_gamma_r[2] = {ex2(gamma_r[0]), ex2(gamma_r[1])};

    // L = strict_lower(diag(beta n) K K^T diag(n)) as fp32 [C][C], then T0 in place.
    // In place over the accumulator first, then stored: in one loop the compiler, unable to tell
    // sT from knorm, re-read knorm after every store (ncu, v9b at B4: 8.5% of the kernel's samples
    // on this loop, short scoreboard).
    float* sT = sm.t.data();
    CUTE_UNROLL
    for (int i = 0; i < size(tKK); i += 2) {
      const int r = get<0>(cS(i)), c = get<1>(cS(i));
      const float b = beta_n_r[half(i)];
      const float2 nc = *reinterpret_cast<const float2*>(&sm.knorm[c]);
      tKK(i) = c < r ? b * tKK(i) * nc.x : 0.f;
      tKK(i + 1) = c + 1 < r ? b * tKK(i + 1) * nc.y : 0.f;
    }
    CUTE_UNROLL
    for (int i = 0; i < size(tKK); i += 2)
      *reinterpret_cast<float2*>(&sT[get<0>(cS(i)) * kLdT + get<1>(cS(i))]) = make_float2(tKK(i), tKK(i + 1));
    sync();
    invert_unit_lower_64(sT, sm.scratch.data(), [] { sync(); });
    if (a.tmat.ptr) store_t(sT, sm.gamma);
    if constexpr (kTPairs) {
      store_t_pairs(sT, cS, r0, gamma_r, exp_gamma_r);
      return;
    }

    // A operands, one at a time: Tu, then Tw (t_pairs).
    // Register p of an operand holds what register p of the accumulator layout (tKK's) would: the
    // pair (i, i + 1) is one 32-bit register.
    auto build_operand = [&](auto& rA, bool u) {
      auto* pairs = reinterpret_cast<uint32_t*>(raw_pointer_cast(rA.data()));
      CUTE_UNROLL
      for (int i = 0; i < size(tKK); i += 2) {
        const int r = get<0>(cS(i)), c = get<1>(cS(i)), h = half(i), p = tKK.layout()(i) / 2;
        const uint2 tuw = t_pairs(sT, r, c, gamma_r[h], exp_gamma_r[h]);
        pairs[p] = u ? tuw.x : tuw.y;
      }
    };
    products(tKK.layout(), build_operand);
  }

  // u = Tu V, then w = Tw K, from A operands that build_operand(rA, u) fills (registers laid out
  // as an [C, C] accumulator of MmaS: acc), each in two [C, DK / 2] column halves through one
  // accumulator (4 CTAs an SM: 128 registers a thread). Half h of the output reads only half h of
  // B (V's, K's columns), so it goes into those very columns once every warp's GEMM is done with
  // them: the outputs need no buffers of their own, and only one A operand is live at a time. Each
  // output tile then goes to the workspace (store_rows).
  template <class AccLayout, class Build>
  CUTE_DEVICE void products(const AccLayout& acc, Build&& build_operand) const {
    auto& sm = chunk_smem<typename T::WyStorage>();
    Tensor sK = make_tensor(make_smem_ptr(sm.k.data()), typename T::LayoutRowsDK{});    // [C, DK]
    Tensor sKt = make_tensor(make_smem_ptr(sm.k.data()), typename T::LayoutRowsDKt{});  // [DK, C]
    Tensor sV = make_tensor(make_smem_ptr(sm.v.data()), typename T::LayoutRowsDK{});    // [C, V]
    Tensor sVt = make_tensor(make_smem_ptr(sm.v.data()), typename T::LayoutRowsDKt{});  // [V, C]
    typename T::MmaW mma_w;  // w = Tw K and u = Tu V: both [C, C] x [C, DK], in column halves
    auto thr_w = mma_w.get_thread_slice(tid);
    using HalfCols = Shape<Int<kDK / 2>, Int<kC>>;
    Tensor tX = partition_fragment_C(mma_w, Shape<Int<kC>, Int<kDK / 2>>{});  // fp32 [C, DK / 2]
    auto identity = [](int, float x) { return x; };
    auto product_in_place = [&](auto& rA, const auto& sBt, const auto& sB) {  // sB = rA . sB, sBt its [DK, C] view
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        gemm_zero<true>(mma_w, rA, thr_w.partition_fragment_B(local_tile(sBt, HalfCols{}, make_coord(h, 0))), tX);
        warpgroup_wait<0>();
        sync();  // every warp's reads of B's half h are done
        store_pairs<Element>(tX, thr_w.partition_C(local_tile(sB, Shape<Int<kC>, Int<kDK / 2>>{}, make_coord(0, h))), identity);
      }
      cutlass::arch::fence_view_async_shared();  // this thread's writes, before a TMA store reads them
      sync();  // the output tile complete
    };
    {
      Tensor rTu = make_tensor<Element>(acc_as_operand_a_layout(acc));
      build_operand(rTu, true);
      product_in_place(rTu, sVt, sV);
    }
    store_rows(sV, a.u, p.tma_u, p.shape_u);
    {
      Tensor rTw = make_tensor<Element>(acc_as_operand_a_layout(acc));
      build_operand(rTw, false);
      product_in_place(rTw, sKt, sK);
    }
    store_rows(sK, a.w, p.tma_w, p.shape_w);
    if (kTma && tid == 0) tma_store_wait<0>();  // the tiles stay readable until the stores have read them
  }

  // The backward's rerun with the forward's T at hand (ChunkFwdArgs::wy_from_t; a.tmat, 16-bit,
  // gated: T_rc = T0_rc exp(gamma_r - gamma_c)): w and u are two GEMMs with column-scaled copies
  // of T, Tu = T diag(beta) and Tw = T diag(beta n exp(gamma)) (T0_rc exp(gamma_r) = T_rc
  // exp(gamma_c), the exponent <= 0) — no K K^T, no inverse. gamma, the gates' fusion and K's
  // norms as in run(); T is read, not written. What FLA's backward does with its forward's A.
  CUTE_DEVICE void run_from_t() {
    auto& sm = chunk_smem<typename T::WyStorage>();
    Tensor sK = make_tensor(make_smem_ptr(sm.k.data()), typename T::LayoutRowsDK{});  // [C, DK]
    const int valid = it.valid_rows(j);
    const int warp = tid / 32;
    float g2[2];
    uint32_t b2[2];
    // The operands' registers hold T's (r, c) as MmaS's [C, C] accumulator would (run()'s tKK):
    // this thread's rows r0 and r0 + 8, column pairs (c, c + 1). Loaded while K and V land; rows
    // past the sequence end and pairs above the diagonal (T's zeros) are not read.
    typename T::MmaS mma_s;
    auto thr_s = mma_s.get_thread_slice(tid);
    Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kC>>{}));  // (row, col) per register
    using AccLayout = decltype(partition_fragment_C(mma_s, Shape<Int<kC>, Int<kC>>{}).layout());
    constexpr int kPairs = decltype(size(cS))::value / 2;
    uint32_t t_pair[kPairs];  // 16-bit (T_rc, T_r,c+1)
    land_rows(valid, g2, b2, [&] {
      const int r0 = get<0>(cS(0));
      const Element* t_rows = static_cast<const Element*>(a.tmat.ptr);
      const Element* row[2] = {t_rows + it.row(a.tmat, t0() + r0, it.hv), t_rows + it.row(a.tmat, t0() + r0 + 8, it.hv)};
      CUTE_UNROLL
      for (int i = 0; i < 2 * kPairs; i += 2) {
        const int r = get<0>(cS(i)), c = get<1>(cS(i));
        t_pair[i / 2] = r < valid && c <= r ? __ldg(reinterpret_cast<const unsigned*>(row[(r - r0) / 8] + c)) : 0u;
      }
    });
    {
      const float n = a.l2norm ? l2_inverse_norm<kDK, 2>(sK, tid / 2, tid % 2) : 1.f;
      if (tid % 2 == 0) sm.knorm[tid / 2] = n;
    }
    if (warp == 0) scan_gates(g2, b2, sm.gamma, sm.beta);
    sync();  // gamma, beta, knorm visible

    auto build_operand = [&](auto& rA, bool u) {
      auto* pairs = reinterpret_cast<uint32_t*>(raw_pointer_cast(rA.data()));
      CUTE_UNROLL
      for (int i = 0; i < 2 * kPairs; i += 2) {
        const int c = get<1>(cS(i)), p = AccLayout{}(i) / 2;
        const float2 t = unpack2<Element>(t_pair[i / 2]);
        float2 f = *reinterpret_cast<const float2*>(&sm.beta[c]);
        if (!u) {
          const float2 nc = *reinterpret_cast<const float2*>(&sm.knorm[c]);
          const float2 gc = *reinterpret_cast<const float2*>(&sm.gamma[c]);
          f.x *= nc.x * ex2(gc.x);
          f.y *= nc.y * ex2(gc.y);
        }
        pairs[p] = pack2<Element>(t.x * f.x, t.y * f.y);
      }
    };
    products(AccLayout{}, build_operand);
  }
};

}  // namespace attnkit::cuda::gdn
