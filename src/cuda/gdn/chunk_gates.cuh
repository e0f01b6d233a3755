// src/cuda/gdn/chunk_gates.cuh — one chunk's gates by one warp: lane l holds rows 2l and 2l + 1.
// load_chunk_gates reads g and beta (0 past the sequence end; beta as raw bits, converted later:
// a 16-bit beta's conversion right after its load held the warp there); finish_chunk_gates applies
// the fused gate and the sigmoid and writes gamma, the in-chunk inclusive cumsum of g in log2
// units, and beta to shared memory (rows past the end: gamma stays the last row's, beta 0), and
// gamma's live rows to `gamma_out`. The WY kernel's, and the rerun recurrence's w / u
// warpgroup when it forms w and u from the forward's kept T.
#pragma once
#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/gdn/chunk_fwd_args.cuh"

namespace attnkit::cuda::gdn {

CUTE_DEVICE void load_chunk_gates(const ChunkFwdArgs& a, const WorkItem& it, int j, int lane, float (&g)[2],
                                  uint32_t (&beta_bits)[2]) {
  const int valid = it.valid_rows(j);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int r = 2 * lane + e;
    g[e] = 0.f;
    beta_bits[e] = 0;  // 0.f in every dtype
    if (r < valid) {
      const int64_t t = it.t0 + int64_t(j) * 64 + r;
      g[e] = a.g.data.ptr ? a.g.at(it.b, t, it.hv) : 0.f;
      beta_bits[e] = a.beta.bits_at(it.b, t, it.hv);
    }
  }
}

// kOptionalOut: gamma_out may be null (then nothing is written out).
template <bool kOptionalOut = false>
CUTE_DEVICE void finish_chunk_gates(const ChunkFwdArgs& a, const WorkItem& it, int j, int lane, float (&g)[2],
                                    const uint32_t (&beta_bits)[2], float* gamma, float* beta_out, float* gamma_out) {
  const int valid = it.valid_rows(j);
  float beta[2] = {a.beta.data.from_bits(beta_bits[0]), a.beta.data.from_bits(beta_bits[1])};
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
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int r = 2 * lane + e;
    gamma[r] = cum[e];
    beta_out[r] = beta[e];
    if ((!kOptionalOut || gamma_out) && r < valid) gamma_out[it.row(a.gamma, int64_t(j) * 64 + r, it.hv)] = cum[e];
  }
}

}  // namespace attnkit::cuda::gdn
