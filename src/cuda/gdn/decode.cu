// src/cuda/gdn/decode.cu — gated delta rule recurrent decode on the GPU (fused_recurrent semantics,
// spec/gdn.md "Decode"): a few tokens per sequence, the fp32 state read once and written once.
//
// One CTA per (sequence, value head). The K x V state ("K-first", V contiguous) is split over
// kSplit x D threads: thread (kc, v) keeps rows kc*R .. kc*R+R-1 of column v in registers (R = D /
// kSplit), so loads and stores of the state are coalesced along v and it never leaves registers
// between tokens. Per token the two reductions over K (h^T k and h^T q) are a register sum plus a
// kSplit-way sum through shared memory. Memory-bound: the floor is 2 * K * V * 4 bytes per
// (sequence, head) for the state, plus the token inputs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "attnkit/gdn.hpp"
#include "attnkit/semantics/heads.hpp"
#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/gdn/api.hpp"

namespace attnkit::cuda {
namespace {

// A float-like input of any of our dtypes, read by element index.
struct AnyFloat {
  const void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  __device__ float operator[](int64_t i) const {
    switch (dtype) {
      case DType::kBFloat16: {
        const unsigned short b = static_cast<const unsigned short*>(ptr)[i];
        return __uint_as_float(static_cast<unsigned>(b) << 16);
      }
      case DType::kFloat16: return __half2float(static_cast<const __half*>(ptr)[i]);
      case DType::kFloat64: return static_cast<float>(static_cast<const double*>(ptr)[i]);
      default: return static_cast<const float*>(ptr)[i];
    }
  }
};

// A [B, T, heads, F] tensor (or [B, T, heads] with F = 1): strides of (b, t, head).
struct TokenTensor {
  AnyFloat data;
  int64_t sb = 0, st = 0, sh = 0;
  __device__ float at(int64_t b, int64_t t, int64_t h, int64_t f = 0) const { return data[b * sb + t * st + h * sh + f]; }
};

struct DecodeArgs {
  TokenTensor q, k, v, g, gk, beta;
  const float* A_log = nullptr;
  const float* dt_bias = nullptr;
  int64_t a_stride = 1, dt_stride = 1;
  float* state = nullptr;
  int64_t s_slot = 0, s_head = 0, s_row = 0;  // strides of (slot, head, k); v is contiguous
  const void* state_indices = nullptr;
  bool indices_64 = false;
  const int64_t* cu_seqlens = nullptr;
  void* out = nullptr;
  DType out_dtype = DType::kBFloat16;
  int64_t o_sb = 0, o_st = 0, o_sh = 0;
  int num_seqs = 0, tokens = 0, H = 0, HV = 0;
  float scale = 1.f;
  bool l2norm = false, beta_logit = false;
};

__device__ void store_out(const DecodeArgs& a, int64_t off, float x) {
  switch (a.out_dtype) {
    case DType::kBFloat16: static_cast<__nv_bfloat16*>(a.out)[off] = __float2bfloat16(x); break;
    case DType::kFloat16: static_cast<__half*>(a.out)[off] = __float2half(x); break;
    default: static_cast<float*>(a.out)[off] = x; break;
  }
}

template <int D, int kSplit>
__global__ void __launch_bounds__(D* kSplit, 1) gdn_decode_kernel(const DecodeArgs a) {
  constexpr int R = D / kSplit;  // state rows per thread
  const int n = blockIdx.x / a.HV, hv = blockIdx.x % a.HV;
  const int v = threadIdx.x % D, kc = threadIdx.x / D;
  const int h = static_cast<int>(qk_head_of(hv, a.HV, a.H));
  int64_t b = n, t0 = 0, len = a.tokens;  // dense: sequence n is batch row n
  if (a.cu_seqlens) {
    b = 0;
    t0 = a.cu_seqlens[n];
    len = a.cu_seqlens[n + 1] - t0;
  }
  const int64_t slot = a.state_indices == nullptr ? n
                       : a.indices_64        ? static_cast<const int64_t*>(a.state_indices)[n]
                                             : static_cast<const int32_t*>(a.state_indices)[n];
  const int64_t obase = b * a.o_sb + hv * a.o_sh;
  if (slot < 0) {  // padding slot: output 0, no state touched
    for (int64_t t = t0; t < t0 + len; ++t)
      if (kc == 0) store_out(a, obase + t * a.o_st + v, 0.f);
    return;
  }
  __shared__ float q_s[D], k_s[D], gk_s[D];
  __shared__ float part_p[kSplit][D], part_o[kSplit][D];
  __shared__ float scalars[4];  // decay, beta, q norm factor, k norm factor

  float* state = a.state + slot * a.s_slot + hv * a.s_head + v;
  float hreg[R];  // rows kc*R + i of column v
#pragma unroll
  for (int i = 0; i < R; ++i) hreg[i] = state[(kc * R + i) * a.s_row];

  const bool has_gk = a.gk.data.ptr != nullptr;
  for (int64_t t = t0; t < t0 + len; ++t) {
    if (threadIdx.x < D) {
      q_s[threadIdx.x] = a.q.at(b, t, h, threadIdx.x);
      k_s[threadIdx.x] = a.k.at(b, t, h, threadIdx.x);
      if (has_gk) gk_s[threadIdx.x] = __expf(a.gk.at(b, t, hv, threadIdx.x));
    }
    if (threadIdx.x == 0) {
      float g = a.g.data.ptr ? a.g.at(b, t, hv) : 0.f;
      if (a.A_log) g = -__expf(a.A_log[hv * a.a_stride]) * softplus(g + a.dt_bias[hv * a.dt_stride]);
      float beta = a.beta.at(b, t, hv);
      if (a.beta_logit) beta = sigmoid(beta);
      scalars[0] = __expf(g);
      scalars[1] = beta;
    }
    __syncthreads();
    if (a.l2norm) {  // uniform branch: every thread reaches the barrier
      if (threadIdx.x < 64) {  // warp 0: q norm, warp 1: k norm
        const float* x = threadIdx.x < 32 ? q_s : k_s;
        float ss = 0.f;
        for (int i = threadIdx.x % 32; i < D; i += 32) ss += x[i] * x[i];
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
        if (threadIdx.x % 32 == 0) scalars[2 + threadIdx.x / 32] = rsqrtf(ss + static_cast<float>(kL2NormEps));
      }
      __syncthreads();
    }
    const float qn = a.l2norm ? scalars[2] : 1.f, kn = a.l2norm ? scalars[3] : 1.f;
    const float decay = scalars[0], beta = scalars[1];
    float p = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      hreg[i] *= has_gk ? gk_s[kc * R + i] : decay;  // h <- diag(exp(g)) h
      p += hreg[i] * k_s[kc * R + i];
    }
    part_p[kc][v] = p * kn;
    __syncthreads();
    p = 0.f;
#pragma unroll
    for (int c = 0; c < kSplit; ++c) p += part_p[c][v];
    const float u = beta * (a.v.at(b, t, hv, v) - p);  // u = beta (v - h^T k)
    float o = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      hreg[i] += k_s[kc * R + i] * kn * u;  // h <- h + k u^T
      o += hreg[i] * q_s[kc * R + i];
    }
    part_o[kc][v] = o * qn;
    __syncthreads();
    if (kc == 0) {
      float acc = 0.f;
#pragma unroll
      for (int c = 0; c < kSplit; ++c) acc += part_o[c][v];
      store_out(a, obase + t * a.o_st + v, a.scale * acc);
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) state[(kc * R + i) * a.s_row] = hreg[i];
}

TokenTensor token_tensor(const TensorView& t, bool varlen) {
  TokenTensor r;
  if (!t.defined()) return r;
  r.data = {t.data, t.dtype};
  r.sb = varlen ? 0 : t.strides[0];
  r.st = t.strides[1];
  r.sh = t.strides[2];
  return r;
}

}  // namespace

Status gdn_decode(const GdnDecodeParams& p) {
  if (p.state_layout != StateLayout::kKV)
    return Unsupported("state_layout: the CUDA decode kernel takes the K-first layout [P, HV, K, V] so far");
  const int64_t K = p.q.size(3), V = p.v.size(3);
  if (K != V || (K != 64 && K != 128))
    return Unsupported("q: the CUDA decode kernel needs K = V in {64, 128}, got K = " + std::to_string(K) +
                       ", V = " + std::to_string(V));
  if (p.state.dtype != DType::kFloat32) return Unsupported("state: the CUDA decode kernel keeps the state in float32");
  if (p.state.strides[3] != 1) return InvalidArgument("state: expected unit stride on the last dim");
  const bool varlen = p.cu_seqlens.defined();
  DecodeArgs a;
  a.q = token_tensor(p.q, varlen);
  a.k = token_tensor(p.k, varlen);
  a.v = token_tensor(p.v, varlen);
  a.g = token_tensor(p.g, varlen);
  a.gk = token_tensor(p.gk, varlen);
  a.beta = token_tensor(p.beta, varlen);
  if (p.A_log.defined()) {
    if (p.A_log.dtype != DType::kFloat32 || p.dt_bias.dtype != DType::kFloat32)
      return Unsupported("A_log: the CUDA decode kernel takes float32 A_log and dt_bias");
    a.A_log = static_cast<const float*>(p.A_log.data);
    a.dt_bias = static_cast<const float*>(p.dt_bias.data);
    a.a_stride = p.A_log.strides[0];
    a.dt_stride = p.dt_bias.strides[0];
  }
  a.state = static_cast<float*>(p.state.data);
  a.s_slot = p.state.strides[0];
  a.s_head = p.state.strides[1];
  a.s_row = p.state.strides[2];
  if (p.state_indices.defined()) {
    a.state_indices = p.state_indices.data;
    a.indices_64 = p.state_indices.dtype == DType::kInt64;
  }
  a.cu_seqlens = varlen ? static_cast<const int64_t*>(p.cu_seqlens.data) : nullptr;
  a.out = p.out.data;
  a.out_dtype = p.out.dtype;
  a.o_sb = varlen ? 0 : p.out.strides[0];
  a.o_st = p.out.strides[1];
  a.o_sh = p.out.strides[2];
  a.num_seqs = static_cast<int>(varlen ? p.cu_seqlens.size(0) - 1 : p.q.size(0));
  a.tokens = static_cast<int>(p.q.size(1));
  a.H = static_cast<int>(p.q.size(2));
  a.HV = static_cast<int>(p.v.size(2));
  a.scale = static_cast<float>(p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(K)));
  a.l2norm = p.use_qk_l2norm;
  a.beta_logit = p.beta_is_logit;
  const int64_t ctas = int64_t(a.num_seqs) * a.HV;
  if (ctas == 0) return Status::Ok();
  if (ctas > INT32_MAX) return Unsupported("q: more than 2^31 - 1 (sequence, head) pairs");
  auto stream = static_cast<cudaStream_t>(p.stream);
  if (K == 128) gdn_decode_kernel<128, 4><<<static_cast<unsigned>(ctas), 512, 0, stream>>>(a);
  else gdn_decode_kernel<64, 4><<<static_cast<unsigned>(ctas), 256, 0, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {StatusCode::kBackendError, std::string("gdn_decode: ") + cudaGetErrorString(err)};
  return Status::Ok();
}

}  // namespace attnkit::cuda
