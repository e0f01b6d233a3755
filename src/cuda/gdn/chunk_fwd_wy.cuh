// src/cuda/gdn/chunk_fwd_wy.cuh — warpgroup 0 of the chunked forward: loads each chunk's rows,
// and computes everything about the chunk that does not depend on the state (the WY form):
// gamma, T0 = (I + L)^-1, w and u, handed to the state warpgroup through the chunk's stage.
//
// Chunk j's loads are issued two chunks ahead (cp.async, zero-filled past the sequence end), so
// they land while chunks j-1 and j-2 compute. Rows past the end get g = beta = 0: their rows of
// L, w, u are then exact zeros and gamma stays at the last valid row's value (gamma_last).
#pragma once
#include <cutlass/arch/barrier.h>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_solve.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn {

using attn::acc_as_operand_a_layout;
using attn::convert_into;
using attn::gemm_zero;

// 16 bytes from global to shared memory: cp.async (zero-filled when !valid), or element by
// element when the rows are not 16-byte aligned.
template <class Element>
CUTE_DEVICE void copy16(Element* dst, const Element* src, bool valid, bool vec16) {
  if (vec16) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
  } else {
    cutlass::Array<Element, 8> piece;
#pragma unroll
    for (int e = 0; e < 8; ++e) piece[e] = valid ? src[e] : Element(0.f);
    st_shared(dst, reinterpret_cast<const uint4&>(piece));
  }
}
CUTE_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
CUTE_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

template <class T>
struct WyWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  const ChunkFwdArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  static CUTE_DEVICE void sync() { ChunkBarriers::sync(ChunkBarriers::kWy, 128); }

  CUTE_DEVICE int valid_rows(int j) const { return it.valid_rows(j); }

  // Chunk j's Q, K rows and this CTA's V columns into stage j % kStages.
  CUTE_DEVICE void load_chunk(int j) {
    auto& st = chunk_smem<T>().stage[j % T::kStages];
    Tensor sQ = make_tensor(make_smem_ptr(st.q.data()), typename T::LayoutRowsDK{});
    Tensor sK = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDK{});
    Tensor sV = make_tensor(make_smem_ptr(st.v.data()), typename T::LayoutRowsBV{});
    const int valid = valid_rows(j);
    const int64_t t0 = int64_t(j) * kC;
    // Thread tid copies column piece tid % units of rows tid / units + i * (128 / units); rows past
    // the end read nothing (zero fill) but still pass a valid address, the chunk's first row.
    auto copy_rows = [&](auto& dst, const Element* base, const RowTensor& x, int head, auto units_c) {
      constexpr int kUnits = decltype(units_c)::value, kStep = 128 / kUnits;
      const int c = (tid % kUnits) * 8, r = tid / kUnits;
      const Element* first = base + it.row(x, t0, head) + c;
      const int64_t step = int64_t(kStep) * x.st;
      const Element* src = first + int64_t(r) * x.st;
#pragma unroll
      for (int i = 0; i < kC / kStep; ++i, src += step) {
        const bool ok = r + i * kStep < valid;
        copy16(&dst(r + i * kStep, c), ok ? src : first, ok, a.vec16);
      }
    };
    copy_rows(sQ, static_cast<const Element*>(a.q.ptr), a.q, it.h, Int<kDK / 8>{});
    copy_rows(sK, static_cast<const Element*>(a.k.ptr), a.k, it.h, Int<kDK / 8>{});
    copy_rows(sV, static_cast<const Element*>(a.v.ptr) + it.vb * kBV, a.v, it.hv, Int<kBV / 8>{});
  }

  // Lane l of warp 0: the gate and beta of rows 2l and 2l + 1 (0 past the sequence end).
  CUTE_DEVICE void load_gates(int j, float (&g)[2], float (&beta)[2]) const {
    const int valid = valid_rows(j);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = 2 * (tid % 32) + e;
      g[e] = beta[e] = 0.f;
      if (r < valid) {
        const int64_t t = it.t0 + int64_t(j) * kC + r;
        g[e] = a.g.data.ptr ? a.g.at(it.b, t, it.hv) : 0.f;
        beta[e] = a.beta.at(it.b, t, it.hv);
      }
    }
  }
  // Warp 0: finish the gates (fused gate, sigmoid) and write their in-chunk inclusive cumsum (log2).
  CUTE_DEVICE void scan_gates(int j, float (&g)[2], float (&beta)[2], float* gamma, float* beta_out) const {
    const int lane = tid % 32, valid = valid_rows(j);
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
    gamma[2 * lane] = (incl - pair + g[0]) * kLog2e;
    gamma[2 * lane + 1] = incl * kLog2e;
    beta_out[2 * lane] = beta[0];
    beta_out[2 * lane + 1] = beta[1];
  }

  // q, k <- x / sqrt(sum x^2 + eps) in place: thread t normalises row t % 64 of Q (t < 64) or K.
  CUTE_DEVICE void l2norm_rows(typename T::Stage& st) const {
    Tensor s = make_tensor(make_smem_ptr(tid < 64 ? st.q.data() : st.k.data()), typename T::LayoutRowsDK{});
    const int r = tid % 64;
    using Piece = cutlass::Array<Element, 8>;  // 16 bytes, contiguous in the swizzled tile
    Piece row[kDK / 8];
    float ss[4] = {0.f, 0.f, 0.f, 0.f};  // independent partial sums: no serial FMA chain
#pragma unroll
    for (int c = 0; c < kDK / 8; ++c) {
      const uint4 raw = ld_shared_v4(&s(r, 8 * c));
      row[c] = reinterpret_cast<const Piece&>(raw);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss[e % 4] = fmaf(float(row[c][e]), float(row[c][e]), ss[e % 4]);
    }
    const float inv = rsqrtf((ss[0] + ss[1]) + (ss[2] + ss[3]) + static_cast<float>(kL2NormEps));
#pragma unroll
    for (int c = 0; c < kDK / 8; ++c) {
#pragma unroll
      for (int e = 0; e < 8; ++e) row[c][e] = Element(float(row[c][e]) * inv);
      st_shared(&s(r, 8 * c), reinterpret_cast<const uint4&>(row[c]));
    }
  }

  CUTE_DEVICE void run() {
    auto& sm = chunk_smem<T>();
    typename T::MmaS mma_s;
    typename T::MmaW mma_w;
    typename T::MmaU mma_u;
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_w = mma_w.get_thread_slice(tid);
    auto thr_u = mma_u.get_thread_slice(tid);
    const int warp = tid / 32;
    const int n = it.nchunks;
    load_chunk(0);  // n >= 1 here
    cp_async_commit();
    if (n > 1) load_chunk(1);
    cp_async_commit();
    Tensor cS = thr_s.partition_C(make_identity_tensor(Shape<Int<kC>, Int<kC>>{}));  // (row, col) per register
    for (int j = 0; j < n; ++j) {
      const int s = j % T::kStages;
      auto& st = sm.stage[s];
      float* gamma = sm.gamma[s];
      float* beta = sm.beta[s];
      float g2[2], b2[2];
      if (warp == 0) load_gates(j, g2, b2);  // their latency overlaps the wait below
      cp_async_wait<1>();  // chunk j landed (j + 1 may be in flight)
      cutlass::arch::fence_view_async_shared();
      sync();
      if (a.l2norm) {
        l2norm_rows(st);
        cutlass::arch::fence_view_async_shared();
        sync();
      }
      Tensor sK = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDK{});   // [C, DK]
      Tensor sKt = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDKt{}); // [DK, C]
      Tensor sVt = make_tensor(make_smem_ptr(st.v.data()), typename T::LayoutRowsBVt{}); // [BV, C]
      Tensor tKK = partition_fragment_C(mma_s, Shape<Int<kC>, Int<kC>>{});  // fp32 [C, C]: K K^T
      {
        Tensor tA_K = thr_s.partition_fragment_A(sK);
        Tensor tB_K = thr_s.partition_fragment_B(sK);
        gemm_zero<false>(mma_s, tA_K, tB_K, tKK);
      }
      if (warp == 0) scan_gates(j, g2, b2, gamma, beta);
      warpgroup_wait<0>();
      sync();  // gamma, beta visible

      // This thread's accumulator rows are r0 and r0 + 8 (h = 0, 1); its columns vary.
      const int r0 = get<0>(cS(0));
      auto half = [&](int i) { return (get<0>(cS(i)) - r0) / 8; };
      const float beta_r[2] = {beta[r0], beta[r0 + 8]};
      const float gamma_r[2] = {gamma[r0], gamma[r0 + 8]};
      const float exp_gamma_r[2] = {ex2(gamma_r[0]), ex2(gamma_r[1])};

      // L = strict_lower(diag(beta) K K^T) into the w buffer as fp32 [C][C], then T0 in place.
      float* sT = reinterpret_cast<float*>(st.w.data());
      CUTE_UNROLL
      for (int i = 0; i < size(tKK); i += 2) {
        const int r = get<0>(cS(i)), c = get<1>(cS(i));
        const float b = beta_r[half(i)];
        *reinterpret_cast<float2*>(&sT[r * kC + c]) = make_float2(c < r ? b * tKK(i) : 0.f, c + 1 < r ? b * tKK(i + 1) : 0.f);
      }
      sync();
      invert_unit_lower_64(sT, reinterpret_cast<float*>(st.scratch.data()), [] { sync(); });

      // A operands: Tw_rc = T0_rc beta_c exp(gamma_r), Tu_rc = T0_rc beta_c exp(gamma_r - gamma_c)
      // (only r >= c: above the diagonal T0 is 0 and the exponent could overflow).
      Tensor tTu = make_tensor<float>(tKK.layout());
      CUTE_UNROLL
      for (int i = 0; i < size(tKK); i += 2) {
        const int r = get<0>(cS(i)), c = get<1>(cS(i)), h = half(i);
        const float2 t0 = *reinterpret_cast<const float2*>(&sT[r * kC + c]);
        const float2 bc = *reinterpret_cast<const float2*>(&beta[c]);
        const float2 gc = *reinterpret_cast<const float2*>(&gamma[c]);
        const float er = exp_gamma_r[h];
        tKK(i) = t0.x * bc.x * er;
        tKK(i + 1) = t0.y * bc.y * er;
        tTu(i) = c <= r ? t0.x * bc.x * ex2(gamma_r[h] - gc.x) : 0.f;
        tTu(i + 1) = c + 1 <= r ? t0.y * bc.y * ex2(gamma_r[h] - gc.y) : 0.f;
      }
      Tensor rTw = make_tensor<Element>(acc_as_operand_a_layout(tKK.layout()));
      Tensor rTu = make_tensor<Element>(acc_as_operand_a_layout(tKK.layout()));
      convert_into(make_tensor(tKK.data(), rTw.layout()), rTw);
      convert_into(make_tensor(tTu.data(), rTu.layout()), rTu);
      sync();  // every read of T0 is done: w may overwrite it

      Tensor tW = partition_fragment_C(mma_w, Shape<Int<kC>, Int<kDK>>{});  // fp32 [C, DK]
      Tensor tU = partition_fragment_C(mma_u, Shape<Int<kC>, Int<kBV>>{});  // fp32 [C, BV]
      {
        Tensor tB_K = thr_w.partition_fragment_B(sKt);
        Tensor tB_V = thr_u.partition_fragment_B(sVt);
        gemm_zero<true>(mma_w, rTw, tB_K, tW);
        gemm_zero<true>(mma_u, rTu, tB_V, tU);
      }
      warpgroup_wait<0>();
      sync();  // V is no longer read: u may overwrite it

      // Publish w [C, DK] and u (fragment order) for the state warpgroup.
      Tensor sW = make_tensor(make_smem_ptr(st.w.data()), typename T::LayoutRowsDK{});
      store_pairs<Element>(tW, thr_w.partition_C(sW), [](int, float x) { return x; });
      auto* u = reinterpret_cast<uint32_t*>(st.v.data()) + tid * (size(tU) / 2);
      CUTE_UNROLL
      for (int i = 0; i < size(tU); i += 2) u[i / 2] = pack2<Element>(tU(i), tU(i + 1));
      cutlass::arch::fence_view_async_shared();
      ChunkBarriers::arrive(ChunkBarriers::kFull + s, 256);

      // Chunk j + 2 goes where chunk j - 1 was, once the state warpgroup is done with it.
      if (j + 2 < n) {
        if (j + 2 >= T::kStages) ChunkBarriers::sync(ChunkBarriers::kEmpty + (j + 2) % T::kStages, 256);
        load_chunk(j + 2);
      }
      cp_async_commit();
    }
  }
};

}  // namespace attnkit::cuda::gdn
