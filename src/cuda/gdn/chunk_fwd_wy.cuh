// src/cuda/gdn/chunk_fwd_wy.cuh — the WY kernel of the chunked forward: one warpgroup per
// (chunk, value head) computes everything about the chunk that does not depend on the state —
// gamma, T0 = (I + L)^-1, w and u (the WY form, spec/gdn.md) — and writes w, u and gamma to the
// workspace for the recurrence kernel.
//
// Every chunk is independent here, so the whole grid runs at once (several CTAs per SM hide each
// other's latency); the recurrence kernel that follows only streams the results. Rows past the
// sequence end get g = beta = 0: their rows of L, w, u are exact zeros and are not written.
#pragma once
#include <cutlass/arch/barrier.h>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"
#include "src/cuda/gdn/chunk_fwd_solve.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn {

using attn::acc_as_operand_a_layout;
using attn::convert_into;
using attn::gemm_zero;

template <class T>
struct WyChunk {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK;
  const ChunkFwdArgs& a;
  const WorkItem& it;  // the sequence and value head (vb = 0)
  int j;               // the chunk
  int tid;             // 0..127

  static CUTE_DEVICE void sync() { __syncthreads(); }
  CUTE_DEVICE int64_t t0() const { return int64_t(j) * kC; }

  // Lane l of warp 0: the gate and beta of rows 2l and 2l + 1 (0 past the sequence end).
  CUTE_DEVICE void load_gates(float (&g)[2], float (&beta)[2]) const {
    const int valid = it.valid_rows(j);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * (tid % 32) + e;
      g[e] = beta[e] = 0.f;
      if (r < valid) {
        const int64_t t = it.t0 + t0() + r;
        g[e] = a.g.data.ptr ? a.g.at(it.b, t, it.hv) : 0.f;
        beta[e] = a.beta.at(it.b, t, it.hv);
      }
    }
  }
  // Warp 0: finish the gates (fused gate, sigmoid), write their in-chunk inclusive cumsum (log2)
  // to shared memory and, for the live rows, to the workspace.
  CUTE_DEVICE void scan_gates(float (&g)[2], float (&beta)[2], float* gamma, float* beta_out) const {
    const int lane = tid % 32, valid = it.valid_rows(j);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const bool live = 2 * lane + e < valid;  // rows past the end stay exactly 0
      if (a.A_log && live) g[e] = -__expf(a.A_log[it.hv * a.a_stride]) * softplus(g[e] + a.dt_bias[it.hv * a.dt_stride]);
      if (a.beta_logit && live) beta[e] = sigmoid(beta[e]);
    }
    const float pair = g[0] + g[1];
    float incl = pair;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float x = __shfl_up_sync(0xffffffff, incl, o);
      if (lane >= o) incl += x;
    }
    constexpr float kLog2e = 1.4426950408889634f;
    const float cum[2] = {(incl - pair + g[0]) * kLog2e, incl * kLog2e};
    auto* out = static_cast<float*>(a.gamma.ptr);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * lane + e;
      gamma[r] = cum[e];
      beta_out[r] = beta[e];
      if (r < valid) out[it.row(a.gamma, t0() + r, it.hv)] = cum[e];
    }
  }

  // T = (I + L_Gamma)^-1 of the gated L (spec/gdn.md), the backward's: T0 is its ungated twin, and
  // L_Gamma = D L D^-1 with D = diag(exp(gamma)) gives T_rc = T0_rc exp(gamma_r - gamma_c) (r >= c:
  // the exponent is <= 0). Live rows to a.tmat in 16-bit, 8 columns a store. Reads T0 and gamma
  // only, so the operands below are built from T0 without a barrier between.
  CUTE_DEVICE void store_t(const float* sT, const float* gamma, int valid) const {
    CUTE_UNROLL
    for (int i = 0; i < kC * kC / 8 / 128; ++i) {
      const int piece = tid + 128 * i, r = piece / (kC / 8), c = (piece % (kC / 8)) * 8;
      if (r >= valid) continue;
      float x[8];
      CUTE_UNROLL
      for (int e = 0; e < 8; ++e) x[e] = c + e <= r ? sT[r * kC + c + e] * ex2(gamma[r] - gamma[c + e]) : 0.f;
      const uint4 v{pack2<Element>(x[0], x[1]), pack2<Element>(x[2], x[3]), pack2<Element>(x[4], x[5]), pack2<Element>(x[6], x[7])};
      st_global_v4(static_cast<Element*>(a.tmat.ptr) + it.row(a.tmat, t0() + r, it.hv) + c, v);
    }
  }

  CUTE_DEVICE void run() {
    auto& sm = chunk_smem<typename T::WyStorage>();
    Tensor sK = make_tensor(make_smem_ptr(sm.k.data()), typename T::LayoutRowsDK{});    // [C, DK]
    Tensor sKt = make_tensor(make_smem_ptr(sm.k.data()), typename T::LayoutRowsDKt{});  // [DK, C]
    Tensor sV = make_tensor(make_smem_ptr(sm.v.data()), typename T::LayoutRowsDK{});    // [C, V]
    Tensor sVt = make_tensor(make_smem_ptr(sm.v.data()), typename T::LayoutRowsDKt{});  // [V, C]
    const int valid = it.valid_rows(j);
    const ChunkPieces<kDK, typename T::LayoutRowsDK> pieces(tid, sm.k.data());
    pieces.copy(cute::cast_smem_ptr_to_uint(sm.k.data()), static_cast<const Element*>(a.k.ptr), a.k, it, it.h, j, valid, a.vec16);
    pieces.copy(cute::cast_smem_ptr_to_uint(sm.v.data()), static_cast<const Element*>(a.v.ptr), a.v, it, it.hv, j, valid, a.vec16);
    cp_async_commit();
    const int warp = tid / 32;
    float g2[2], b2[2];
    if (warp == 0) load_gates(g2, b2);  // their latency overlaps the copies'
    cp_async_wait<0>();
    cutlass::arch::fence_view_async_shared();
    sync();
    if (a.l2norm) {
      l2norm_row<kDK, 2>(sK, tid / 2, tid % 2);
      cutlass::arch::fence_view_async_shared();
      sync();
    }

    typename T::MmaS mma_s;
    typename T::MmaW mma_w;  // w = Tw K and u = Tu V: both [C, C] x [C, DK], in column halves
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_w = mma_w.get_thread_slice(tid);
    Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kC>>{}));  // (row, col) per register
    Tensor tKK = partition_fragment_C(mma_s, Shape<Int<kC>, Int<kC>>{});            // fp32 [C, C]: K K^T
    {
      Tensor tA_K = thr_s.partition_fragment_A(sK);
      Tensor tB_K = thr_s.partition_fragment_B(sK);
      gemm_zero<false>(mma_s, tA_K, tB_K, tKK);
    }
    if (warp == 0) scan_gates(g2, b2, sm.gamma, sm.beta);
    warpgroup_wait<0>();
    sync();  // gamma, beta visible

    // This thread's accumulator rows are r0 and r0 + 8 (h = 0, 1); its columns vary.
    const int r0 = get<0>(cS(0));
    auto half = [&](int i) { return (get<0>(cS(i)) - r0) / 8; };
    const float beta_r[2] = {sm.beta[r0], sm.beta[r0 + 8]};
    const float gamma_r[2] = {sm.gamma[r0], sm.gamma[r0 + 8]};
    const float exp_gamma_r[2] = {ex2(gamma_r[0]), ex2(gamma_r[1])};

    // L = strict_lower(diag(beta) K K^T) as fp32 [C][C], then T0 in place.
    float* sT = sm.t.data();
    CUTE_UNROLL
    for (int i = 0; i < size(tKK); i += 2) {
      const int r = get<0>(cS(i)), c = get<1>(cS(i));
      const float b = beta_r[half(i)];
      *reinterpret_cast<float2*>(&sT[r * kC + c]) = make_float2(c < r ? b * tKK(i) : 0.f, c + 1 < r ? b * tKK(i + 1) : 0.f);
    }
    sync();
    invert_unit_lower_64(sT, sm.scratch.data(), [] { sync(); });
    if (a.tmat.ptr) store_t(sT, sm.gamma, valid);

    // A operands: Tw_rc = T0_rc beta_c exp(gamma_r), Tu_rc = T0_rc beta_c exp(gamma_r - gamma_c)
    // (only r >= c: above the diagonal T0 is 0 and the exponent could overflow). One after the
    // other through tKK's registers: fewer live at once.
    Tensor rTw = make_tensor<Element>(acc_as_operand_a_layout(tKK.layout()));
    Tensor rTu = make_tensor<Element>(acc_as_operand_a_layout(tKK.layout()));
    auto build_operand = [&](auto& dst, bool u) {
      CUTE_UNROLL
      for (int i = 0; i < size(tKK); i += 2) {
        const int r = get<0>(cS(i)), c = get<1>(cS(i)), h = half(i);
        const float2 t0 = *reinterpret_cast<const float2*>(&sT[r * kC + c]);
        const float2 bc = *reinterpret_cast<const float2*>(&sm.beta[c]);
        if (u) {
          const float2 gc = *reinterpret_cast<const float2*>(&sm.gamma[c]);
          tKK(i) = c <= r ? t0.x * bc.x * ex2(gamma_r[h] - gc.x) : 0.f;
          tKK(i + 1) = c + 1 <= r ? t0.y * bc.y * ex2(gamma_r[h] - gc.y) : 0.f;
        } else {
          tKK(i) = t0.x * bc.x * exp_gamma_r[h];
          tKK(i + 1) = t0.y * bc.y * exp_gamma_r[h];
        }
      }
      convert_into(make_tensor(tKK.data(), dst.layout()), dst);
    };
    build_operand(rTw, false);
    build_operand(rTu, true);

    // One [C, DK / 2] accumulator at a time (4 CTAs an SM: 128 registers a thread). w goes out
    // through T0's buffer (free once every thread has built its operands), u through K's (free
    // once every W GEMM is done), each tile written to the workspace in 16-byte row pieces while
    // the next GEMM runs.
    using HalfCols = Shape<Int<kDK / 2>, Int<kC>>;
    Tensor tX = partition_fragment_C(mma_w, Shape<Int<kC>, Int<kDK / 2>>{});  // fp32 [C, DK / 2]
    Tensor sW = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(sm.t.data())), typename T::LayoutRowsDK{});  // [C, DK]
    auto identity = [](int, float x) { return x; };
    auto gemm_half = [&](auto& rA, const auto& sBt, int h) {  // tX = A . B^T[h-th half of the rows]
      gemm_zero<true>(mma_w, rA, thr_w.partition_fragment_B(local_tile(sBt, HalfCols{}, make_coord(h, 0))), tX);
    };
    auto store_half = [&](const auto& sDst, int h) {
      store_pairs<Element>(tX, thr_w.partition_C(local_tile(sDst, Shape<Int<kC>, Int<kDK / 2>>{}, make_coord(0, h))), identity);
    };
    gemm_half(rTw, sKt, 0);
    sync();  // every read of T0 is done
    warpgroup_wait<0>();
    store_half(sW, 0);
    gemm_half(rTw, sKt, 1);
    warpgroup_wait<0>();
    store_half(sW, 1);
    gemm_half(rTu, sVt, 0);
    sync();  // w complete in shared memory; every W GEMM done with K
    int jj = j;
    asm volatile("" : "+r"(jj));  // the row count again, not kept live (or spilled) since the loads
    const int valid_out = it.valid_rows(jj);
    store_chunk_rows<kDK>(sW, static_cast<Element*>(a.w.ptr), a.w, it, t0(), it.hv, valid_out, true);
    warpgroup_wait<0>();
    store_half(sK, 0);
    gemm_half(rTu, sVt, 1);
    warpgroup_wait<0>();
    store_half(sK, 1);
    sync();
    store_chunk_rows<kDK>(sK, static_cast<Element*>(a.u.ptr), a.u, it, t0(), it.hv, valid_out, true);
  }
};

}  // namespace attnkit::cuda::gdn
