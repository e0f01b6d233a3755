// src/cuda/gdn/decode.cu — gated delta rule recurrent decode on the GPU (fused_recurrent semantics,
// spec/gdn.md "Decode"): a few tokens per sequence, the fp32 state read once and written once.
//
// Each (sequence, value head) item's C value columns (of D) are run by a group of threads: a CTA
// per (item, column block) in the general kernel (any strides, and too few items to stream;
// C = D / 2), or one half of a persistent CTA that streams whole items (C = D; contiguous
// states, gdn_decode_stream_kernel). The K x V state ("K-first", V contiguous) is split over the
// group: thread (kc, v) keeps rows kc*R .. kc*R+R-1 of column v (the streaming kernel: of
// columns v, v+1) in registers (R = D / kSplit), so loads and stores of the state are coalesced
// along v and it never leaves registers between tokens. Per token the two reductions over K
// (h^T k and h^T q) are a register sum plus a kSplit-way sum through shared memory. The floor is
// memory: 2 * K * V * 4 bytes per (sequence, head) for the state, plus the token inputs
// (docs/perf/gdn_decode.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cutlass/arch/barrier.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attnkit/gdn.hpp"
#include "attnkit/semantics/heads.hpp"
#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/gdn/api.hpp"
#include "src/cuda/cuda_status.hpp"
#include "src/cuda/gdn/token_tensor.cuh"
#include "src/cuda/runtime.hpp"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda {
namespace {

struct DecodeArgs {
  TokenTensor q, k, v, g, gk, beta;
  const float* A_log = nullptr;
  const float* dt_bias = nullptr;
  int64_t a_stride = 1, dt_stride = 1;
  float* state = nullptr;
  int64_t s_slot = 0, s_head = 0;  // strides of (slot, head)
  int64_t s_row = 0, s_col = 1;    // strides of (k, v): K-first (V, 1), V-first (1, K) when contiguous
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

// Where (sequence n, value head hv) reads its tokens and state.
struct DecodeItem {
  int n, hv, h;
  int64_t b, t0, len, slot, obase;
  DecodeItem() = default;
  __device__ DecodeItem(const DecodeArgs& a, int item) : n(item / a.HV), hv(item % a.HV) {
    h = static_cast<int>(qk_head_of(hv, a.HV, a.H));
    b = n;  // dense: sequence n is batch row n
    t0 = 0;
    len = a.tokens;
    if (a.cu_seqlens) {
      b = 0;
      t0 = a.cu_seqlens[n];
      len = a.cu_seqlens[n + 1] - t0;
    }
    slot = a.state_indices == nullptr ? n
           : a.indices_64             ? static_cast<const int64_t*>(a.state_indices)[n]
                                      : static_cast<const int32_t*>(a.state_indices)[n];
    obase = b * a.o_sb + hv * a.o_sh;
  }
};

// The threads that run one item together: the whole CTA (the general kernel) or one half of it
// (the streaming kernel's two halves run two items side by side). bar: a named barrier id.
struct ThreadGroup {
  int tid, bar, count;
  __device__ void sync() const { asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(count) : "memory"); }
};

// The shared memory of a group running one item over C of its D value columns, split kSplit ways
// over the K rows.
template <int D, int C, int kSplit>
struct DecodeSmem {
  float q[D], k[D], v[D], gk[D];
  float part_p[kSplit][C], part_o[kSplit][C];
  float scalars[4];  // decay, beta, q norm factor, k norm factor
  DecodeItem item[2];  // the streaming kernel's current and previous items (kept out of registers)
};

// Token t's q, k, v (and per-key decays) into shared memory, its gate and beta into scalars.
template <int D, int C, int kSplit>
__device__ void stage_inputs(const DecodeArgs& a, const DecodeItem& it, int64_t t, DecodeSmem<D, C, kSplit>& sm, const ThreadGroup& g) {
  const bool has_gk = a.gk.data.ptr != nullptr;
  if (g.tid < D) {
    sm.q[g.tid] = a.q.at(it.b, t, it.h, g.tid);
    sm.k[g.tid] = a.k.at(it.b, t, it.h, g.tid);
    sm.v[g.tid] = a.v.at(it.b, t, it.hv, g.tid);
    if (has_gk) sm.gk[g.tid] = __expf(a.gk.at(it.b, t, it.hv, g.tid));
  }
  if (g.tid == 0) {
    float g = a.g.data.ptr ? a.g.at(it.b, t, it.hv) : 0.f;
    if (a.A_log) g = -__expf(a.A_log[it.hv * a.a_stride]) * softplus(g + a.dt_bias[it.hv * a.dt_stride]);
    float beta = a.beta.at(it.b, t, it.hv);
    if (a.beta_logit) beta = sigmoid(beta);
    sm.scalars[0] = __expf(g);
    sm.scalars[1] = beta;
  }
}

// The first token's q, k, v rows (and gates) into L2 long before the item runs: staged from DRAM
// they put a full memory latency on every item's critical path (ncu, v5b: the group's warps
// waiting on them and at the barrier after them were ~35% of the stall samples).
__device__ void prefetch_first_token(const DecodeArgs& a, const DecodeItem& it, int D) {
  a.q.prefetch_l2(it.b, it.t0, it.h, D);
  a.k.prefetch_l2(it.b, it.t0, it.h, D);
  a.v.prefetch_l2(it.b, it.t0, it.hv, D);
  a.gk.prefetch_l2(it.b, it.t0, it.hv, D);
  a.g.prefetch_l2(it.b, it.t0, it.hv);
  a.beta.prefetch_l2(it.b, it.t0, it.hv);
}

// Runs the item's tokens on the thread's state slice hreg (rows kc*R .. kc*R+R-1 of the VT
// columns from v = c0 + (tid % (C / VT)) * VT; hreg[e * R + i] is row kc*R+i of column v+e),
// writing the outputs of columns c0 .. c0+C-1. The first token's inputs may already be staged
// (first_staged), which lets the caller overlap their loads with the state's. Called by every
// thread of the group g (it has barriers).
template <int D, int C, int kSplit, int VT = 1>
__device__ void decode_tokens(const DecodeArgs& a, const DecodeItem& it, DecodeSmem<D, C, kSplit>& sm, float (&hreg)[VT * D / kSplit],
                              const ThreadGroup& g, int c0 = 0, bool first_staged = false) {
  constexpr int R = D / kSplit, CT = C / VT;
  const int vc = (g.tid % CT) * VT, v = c0 + vc, kc = g.tid / CT;
  const bool has_gk = a.gk.data.ptr != nullptr;
  for (int64_t t = it.t0; t < it.t0 + it.len; ++t) {
    if (t > it.t0 || !first_staged) stage_inputs<D, C, kSplit>(a, it, t, sm, g);
    g.sync();
    // The in-op l2norm's inverse norms are scalars: the dot products run on the raw rows and take
    // them after the reductions, so warps 0 and 1 work them out here with no barrier of their own
    // (read after the next one).
    if (a.l2norm && g.tid < 64) {  // warp 0: q norm, warp 1: k norm
      const float* x = g.tid < 32 ? sm.q : sm.k;
      float ss = 0.f;
      for (int i = g.tid % 32; i < D; i += 32) ss += x[i] * x[i];
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
      if (g.tid % 32 == 0) sm.scalars[2 + g.tid / 32] = rsqrtf(ss + static_cast<float>(kL2NormEps));
    }
    const float decay = sm.scalars[0], beta = sm.scalars[1];
    float p[VT];
#pragma unroll
    for (int e = 0; e < VT; ++e) p[e] = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const float dk = has_gk ? sm.gk[kc * R + i] : decay, kk = sm.k[kc * R + i];
#pragma unroll
      for (int e = 0; e < VT; ++e) {
        hreg[e * R + i] *= dk;  // h <- diag(exp(g)) h
        p[e] += hreg[e * R + i] * kk;
      }
    }
#pragma unroll
    for (int e = 0; e < VT; ++e) sm.part_p[kc][vc + e] = p[e];
    g.sync();
    const float qn = a.l2norm ? sm.scalars[2] : 1.f, kn = a.l2norm ? sm.scalars[3] : 1.f;
    float ku[VT], o[VT];
#pragma unroll
    for (int e = 0; e < VT; ++e) {
      float pe = 0.f;
#pragma unroll
      for (int c = 0; c < kSplit; ++c) pe += sm.part_p[c][vc + e];
      ku[e] = kn * beta * (sm.v[v + e] - kn * pe);  // u = beta (v - h^T k)
      o[e] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const float kk = sm.k[kc * R + i], qq = sm.q[kc * R + i];
#pragma unroll
      for (int e = 0; e < VT; ++e) {
        hreg[e * R + i] += kk * ku[e];  // h <- h + k u^T
        o[e] += hreg[e * R + i] * qq;
      }
    }
#pragma unroll
    for (int e = 0; e < VT; ++e) sm.part_o[kc][vc + e] = o[e];
    g.sync();
    if (kc == 0) {
#pragma unroll
      for (int e = 0; e < VT; ++e) {
        float acc = 0.f;
#pragma unroll
        for (int c = 0; c < kSplit; ++c) acc += sm.part_o[c][vc + e];
        store_out(a, it.obase + t * a.o_st + v + e, a.scale * qn * acc);
      }
    }
  }
}

__device__ void write_zero_outputs(const DecodeArgs& a, const DecodeItem& it, int D, int tid) {
  if (tid < D)
    for (int64_t t = it.t0; t < it.t0 + it.len; ++t) store_out(a, it.obase + t * a.o_st + tid, 0.f);
}

// General strides, and too few items to stream: a CTA per (item, C of its value columns), the
// state slice read straight into registers. Value columns are independent (each its own
// h^T k and u), so C < D spreads an item's state traffic over D / C SMs: one CTA per item left
// B1 H32 (32 items) on 32 SMs, slower than FLA.
template <int D, int C, int kSplit>
__global__ void __launch_bounds__(C* kSplit) gdn_decode_kernel(const DecodeArgs a) {
  constexpr int R = D / kSplit;
  __shared__ DecodeSmem<D, C, kSplit> sm;
  const DecodeItem it(a, blockIdx.x);
  const int c0 = blockIdx.y * C;
  if (it.slot < 0) {  // padding slot: output 0, no state touched
    if (blockIdx.y == 0) write_zero_outputs(a, it, D, threadIdx.x);
    return;
  }
  const int v = c0 + threadIdx.x % C, kc = threadIdx.x / C;
  float* state = a.state + it.slot * a.s_slot + it.hv * a.s_head + v * a.s_col;
  float hreg[R];
#pragma unroll
  for (int i = 0; i < R; ++i) hreg[i] = state[(kc * R + i) * a.s_row];
  decode_tokens<D, C, kSplit>(a, it, sm, hreg, ThreadGroup{static_cast<int>(threadIdx.x), 0, C * kSplit}, c0);
#pragma unroll
  for (int i = 0; i < R; ++i) state[(kc * R + i) * a.s_row] = hreg[i];
}

// Contiguous K x V state slices: persistent CTAs stream the items, in two halves that run
// alternate items side by side, each with its own barrier: one half's reductions and barrier
// waits overlap the other's work (one item at a time, v4, left ~78% of issue slots empty with 16
// warps an SM waiting on each other: 66% of copy bandwidth at B64 H32). The states come by bulk
// async copies into three shared-memory buffers (item j of the CTA's list into buffer j % 3,
// completing on mbarrier j % 6: six, so that each barrier serves one half and its waits come in
// order), issued by the half that frees the buffer as soon as it has the state in registers.
constexpr int kDecodeBufs = 3;  // the streaming kernel's state buffers (its shared memory: kDecodeBufs x D x D fp32)
// Streaming needs at least this many items a CTA; below, the column-split general kernel was
// faster (probe, H200, H32 queued: B1 4.8 vs 7.3 us, B4 7.2 vs 8.5; B8 equal).
constexpr int kDecodeStreamMinItems = 1;
// Value columns a streaming thread owns: 2 (8-byte state loads and stores, 4-way reductions) ran
// 0.5-1% faster than 1 (2-way reductions) at B64 / B256 H32 (probe, queued).
constexpr int kDecodeVT = 2;

template <int D, int kSplit, int VT>
__global__ void __launch_bounds__(2 * D / VT * kSplit, 1) gdn_decode_stream_kernel(const DecodeArgs a, int num_items) {
  static_assert(VT == 1 || VT == 2, "state moves are 4- or 8-byte");
  constexpr int R = D / kSplit, kBufs = kDecodeBufs, kGroup = D / VT * kSplit;
  constexpr uint32_t kStateBytes = D * D * sizeof(float);
  extern __shared__ __align__(128) float stage[];  // [3][D * D] state buffers, K-first
  __shared__ DecodeSmem<D, D, kSplit> sms[2];          // one a half
  __shared__ uint64_t full_raw[2 * kBufs];          // mbarriers: item j's state landed (j % 6)
  auto* full = reinterpret_cast<cutlass::arch::ClusterTransactionBarrier*>(full_raw);
  const int half = threadIdx.x / kGroup;
  const ThreadGroup g{static_cast<int>(threadIdx.x) % kGroup, 1 + half, kGroup};
  DecodeSmem<D, D, kSplit>& sm = sms[half];
  const int v = (g.tid % (D / VT)) * VT, kc = g.tid / (D / VT);
  auto item_of = [&](int j) { return static_cast<int>(blockIdx.x + int64_t(j) * gridDim.x); };
  auto prefetch = [&](int j) {  // item j of this CTA's list, by one thread
    const DecodeItem it(a, item_of(j));
    auto& bar = full[j % (2 * kBufs)];
    if (it.slot < 0) {
      bar.arrive();  // nothing to load; keeps the phases in step
      return;
    }
    bar.arrive_and_expect_tx(kStateBytes);
    const float* src = a.state + it.slot * a.s_slot + it.hv * a.s_head;
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(stage + (j % kBufs) * D * D))), "l"(src), "r"(kStateBytes),
                 "r"(static_cast<uint32_t>(__cvta_generic_to_shared(&bar)))
                 : "memory");
    if (it.len > 0) prefetch_first_token(a, it, D);
  };
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2 * kBufs; ++b) full[b].init(1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int j = 0; j < kBufs && item_of(j) < num_items; ++j) prefetch(j);
  for (int j = half; item_of(j) < num_items; j += 2) {
    const int buf = j % kBufs;
    const DecodeItem it(a, item_of(j));
    const bool staged = it.slot >= 0 && it.len > 0;
    if (staged) stage_inputs<D, D, kSplit>(a, it, it.t0, sm, g);  // their latency overlaps the state wait
    DecodeItem& cur = sm.item[(j / 2) % 2];  // the previous item's slot may still be read
    if (g.tid == 0) cur = it;
    full[j % (2 * kBufs)].wait((j / (2 * kBufs)) & 1);
    float hreg[VT * R];
    if (it.slot >= 0) {
#pragma unroll
      for (int i = 0; i < R; ++i) {
        if constexpr (VT == 2) {
          const float2 x = *reinterpret_cast<const float2*>(&stage[buf * D * D + (kc * R + i) * D + v]);
          hreg[i] = x.x, hreg[R + i] = x.y;
        } else {
          hreg[i] = stage[buf * D * D + (kc * R + i) * D + v];
        }
      }
    }
    g.sync();  // the half has its state: the buffer may be refilled
    if (g.tid == 0 && item_of(j + kBufs) < num_items) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic reads before async writes
      prefetch(j + kBufs);
    }
    if (it.slot < 0) {
      write_zero_outputs(a, it, D, g.tid);
      continue;
    }
    // The item from shared memory (published by the barrier above): at 64 state registers a
    // thread the half has no registers to keep its fields live across the tokens (ptxas: spills).
    decode_tokens<D, D, kSplit, VT>(a, cur, sm, hreg, g, 0, staged);
    float* state = a.state + cur.slot * a.s_slot + cur.hv * a.s_head + v;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if constexpr (VT == 2) *reinterpret_cast<float2*>(&state[(kc * R + i) * D]) = make_float2(hreg[i], hreg[R + i]);
      else state[(kc * R + i) * D] = hreg[i];
    }
  }
}

}  // namespace

Status gdn_decode(const GdnDecodeParams& p) {
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
  // The state of (slot, hv) seen as K x V: K-first [.., K, V] or V-first [.., V, K].
  const bool kfirst = p.state_layout == StateLayout::kKV;
  a.s_row = kfirst ? p.state.strides[2] : p.state.strides[3];
  a.s_col = kfirst ? p.state.strides[3] : p.state.strides[2];
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
  // The streaming kernel reads its smem buffer K-first; V-first states take the general kernel.
  const bool contiguous_slices = kfirst && a.s_row == V && reinterpret_cast<uintptr_t>(a.state) % 16 == 0 && a.s_slot % 4 == 0 &&
                                 a.s_head % 4 == 0;
  const int sms = current_device_sm_count();
  const int per_sm = K == 128 ? 1 : 2;  // streaming CTAs an SM: 3 x 64 KB or 3 x 16 KB of state buffers each
  // Streaming pays when each CTA has several items to overlap; fewer items are spread over more
  // SMs by the general kernel's column split.
  if (contiguous_slices && ctas >= int64_t(kDecodeStreamMinItems) * sms * per_sm) {
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(ctas, int64_t(sms) * per_sm));
    const int smem = static_cast<int>(kDecodeBufs * K * V * sizeof(float));
    // Halves of D / 2 x 4 threads: 2 columns x D / 4 rows a thread (64 state registers at D = 128).
    const cudaError_t ok = K == 128 ? ensure_dynamic_smem<gdn_decode_stream_kernel<128, 2 * kDecodeVT, kDecodeVT>>(smem)
                                    : ensure_dynamic_smem<gdn_decode_stream_kernel<64, 2 * kDecodeVT, kDecodeVT>>(smem);
    ATTNKIT_RETURN_IF_ERROR(cuda_status(ok, "gdn_decode"));
    if (K == 128) gdn_decode_stream_kernel<128, 2 * kDecodeVT, kDecodeVT><<<grid, 512, smem, stream>>>(a, static_cast<int>(ctas));
    else gdn_decode_stream_kernel<64, 2 * kDecodeVT, kDecodeVT><<<grid, 256, smem, stream>>>(a, static_cast<int>(ctas));
  } else if (K == 128) {  // half the columns a CTA, 4-way over the rows: 32 state registers a thread
    gdn_decode_kernel<128, 64, 4><<<dim3(static_cast<unsigned>(ctas), 2), 256, 0, stream>>>(a);
  } else {
    gdn_decode_kernel<64, 32, 4><<<dim3(static_cast<unsigned>(ctas), 2), 128, 0, stream>>>(a);
  }
  return cuda_status(cudaGetLastError(), "gdn_decode");
}

}  // namespace attnkit::cuda
