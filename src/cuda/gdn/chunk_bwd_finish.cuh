// src/cuda/gdn/chunk_bwd_finish.cuh — the chunked backward's passes over tokens, after its
// per-chunk kernels: the per-value-head gradients folded into the op's — GVA sums and the l2norm
// backward (dq, dk), the sigmoid and fused-gate backward (dbeta, dg), and dA_log / ddt_bias summed over
// all tokens in a fixed order (the same bits run after run).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cute/config.hpp>
#include <cutlass/array.h>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/gdn/chunk_bwd_args.cuh"

namespace attnkit::cuda::gdn {

constexpr int kFinishThreads = 256;

__device__ inline int64_t offset_of(const RowTensor& x, int64_t row, int64_t T, int head) {
  return (row / T) * x.sb + (row % T) * x.st + head * x.sh;  // row = b * T + t
}

// One warp per (row, query/key head): the sums over its value heads of dq and dk, through the
// l2norm's backward (y = x rstd: dx = rstd (dy - y (y . dy))), in 16 bits. y and rstd are the ones
// dv_local wrote (qn / kn, rstd_q / rstd_k), as the per-chunk kernel's direct path (no GVA) uses;
// with raw_rows y is formed here from the raw row and rstd, rounded as qn's (the same bits).
template <class E, int kD>
__global__ void __launch_bounds__(kFinishThreads) gdn_bwd_qk_finish_kernel(CUTE_GRID_CONSTANT const BwdFinishArgs a) {
  const int64_t item = (int64_t(blockIdx.x) * kFinishThreads + threadIdx.x) / 32;
  const int64_t rows = a.B * a.T;
  if (item >= rows * a.H) return;
  const int64_t row = item / a.H;
  const int h = static_cast<int>(item % a.H), lane = threadIdx.x % 32, group = a.HV / a.H;
  for (int which = 0; which < 2; ++which) {
    const RowTensor& ws = which ? a.dk : a.dq;
    float dy[kD / 32] = {};
    for (int m = 0; m < group; ++m) {
      const float* in = static_cast<const float*>(ws.ptr) + offset_of(ws, row, a.T, h * group + m);
#pragma unroll
      for (int i = 0; i < kD / 32; ++i) dy[i] += in[lane + 32 * i];
    }
    if (a.l2norm) {
      const RowTensor& yn = which ? a.kn : a.qn;
      const RowTensor& rs = which ? a.rstd_k : a.rstd_q;
      const E* yin = static_cast<const E*>(yn.ptr) + offset_of(yn, row, a.T, h);
      const float rstd = static_cast<const float*>(rs.ptr)[offset_of(rs, row, a.T, h)];
      float y[kD / 32], dot = 0.f;
#pragma unroll
      for (int i = 0; i < kD / 32; ++i) {
        y[i] = a.raw_rows ? float(E(float(yin[lane + 32 * i]) * rstd)) : float(yin[lane + 32 * i]);
        dot += y[i] * dy[i];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, o);
#pragma unroll
      for (int i = 0; i < kD / 32; ++i) dy[i] = rstd * (dy[i] - y[i] * dot);
    }
    const RowTensor& out = which ? a.dk_out : a.dq_out;
    E* o = static_cast<E*>(out.ptr) + offset_of(out, row, a.T, h);
#pragma unroll
    for (int i = 0; i < kD / 32; ++i) o[lane + 32 * i] = E(dy[i]);
  }
}

__device__ inline void store_token(const TokenOut& o, int64_t b, int64_t t, int head, float v) {
  const int64_t i = b * o.sb + t * o.st + head * o.sh;
  switch (o.dtype) {
    case DType::kBFloat16: static_cast<__nv_bfloat16*>(o.ptr)[i] = __float2bfloat16_rn(v); break;
    case DType::kFloat16: static_cast<__half*>(o.ptr)[i] = __float2half_rn(v); break;
    case DType::kFloat64: static_cast<double*>(o.ptr)[i] = v; break;
    default: static_cast<float*>(o.ptr)[i] = v;
  }
}

// One thread per (row, value head): dbeta and dg w.r.t. the op's raw beta and gate. (The token
// kernels are templates only so that each unit holding them keeps its own copy.)
template <class E>
__global__ void __launch_bounds__(kFinishThreads) gdn_bwd_token_finish_kernel(CUTE_GRID_CONSTANT const BwdFinishArgs a) {
  const int64_t item = int64_t(blockIdx.x) * kFinishThreads + threadIdx.x;
  if (item >= a.B * a.T * a.HV) return;
  const int64_t row = item / a.HV, b = row / a.T, t = row % a.T;
  const int hv = static_cast<int>(item % a.HV);
  float db = static_cast<const float*>(a.dbeta.ptr)[offset_of(a.dbeta, row, a.T, hv)];
  if (a.beta_logit) {
    const float s = sigmoid(a.beta.at(b, t, hv));
    db *= s * (1.f - s);
  }
  store_token(a.dbeta_out, b, t, hv, db);
  if (!a.dg_out.ptr) return;
  float dg = static_cast<const float*>(a.dg.ptr)[offset_of(a.dg, row, a.T, hv)];
  if (a.A_log)  // g = -exp(A_log) softplus(x + dt_bias): dg/dx = -exp(A_log) sigmoid(x + dt_bias)
    dg *= -__expf(a.A_log[hv * a.a_stride]) * sigmoid(a.g.at(b, t, hv) + a.dt_bias[hv * a.dt_stride]);
  store_token(a.dg_out, b, t, hv, dg);
}

// One CTA per value head: dA_log = sum_t dg_t g_t, ddt_bias = sum_t dg_t dg_t/dx_t (fused gate).
template <class E>
__global__ void __launch_bounds__(kFinishThreads) gdn_bwd_gate_sums_kernel(CUTE_GRID_CONSTANT const BwdFinishArgs a) {
  const int hv = blockIdx.x;
  const float A = __expf(a.A_log[hv * a.a_stride]), bias = a.dt_bias[hv * a.dt_stride];
  float da = 0.f, dd = 0.f;
  for (int64_t row = threadIdx.x; row < a.B * a.T; row += kFinishThreads) {
    const float dg = static_cast<const float*>(a.dg.ptr)[offset_of(a.dg, row, a.T, hv)];
    const float x = a.g.at(row / a.T, row % a.T, hv) + bias;
    da += dg * (-A * softplus(x));
    dd += dg * (-A * sigmoid(x));
  }
  __shared__ float part[2][kFinishThreads];
  part[0][threadIdx.x] = da;
  part[1][threadIdx.x] = dd;
  __syncthreads();
  for (int n = kFinishThreads / 2; n > 0; n /= 2) {
    if (threadIdx.x < n) {
      part[0][threadIdx.x] += part[0][threadIdx.x + n];
      part[1][threadIdx.x] += part[1][threadIdx.x + n];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    a.dA_log[hv * a.da_stride] = part[0][0];
    a.ddt_bias[hv * a.ddt_stride] = part[1][0];
  }
}

}  // namespace attnkit::cuda::gdn
