// src/cuda/gdn/chunk_fwd_split.cuh — the sequence split of the chunked forward (SegmentSplit,
// chunk_fwd_args.cuh): which segment a recurrence CTA runs, where its state starts and ends, and
// the stitch kernel between the two recurrence passes.
//
// Why it pays: the recurrence is one serial chain of chunks per (sequence, value head, 64 value
// columns), ~2 us a chunk, one CTA an SM. B = 1, H = 16, T = 8192 is 32 chains of 128 chunks on
// 132 SMs. Cut into 3 segments, the first pass (no output: ~2/3 of a chunk's work) runs 96 chains
// of 43 chunks, the output pass 96 of 43: ~0.6x the chain length for ~2x the work, on SMs that
// sat idle. The virtual blocks' P costs as much as the real columns' R (DK value columns of
// "state" each), which is why the split only pays with few chains (plan_split,
// chunk_fwd_plan.hpp, picks the segment count from a cost model).
#pragma once
#include <cute/tensor.hpp>

#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda::gdn {

// Blocks a (segment, sequence, value head) has in a pass: the real value blocks, plus P's virtual
// ones in the first pass. Args: the forward's or bwd_dhu's (BwdDhuArgs, bwd_dhu_split.cuh).
template <class Args>
__host__ __device__ inline int blocks_of_pass(const Args& a) {
  return a.v_blocks + (a.split.pass == SegmentSplit::kEnds ? a.split.extra_blocks : 0);
}

// Segments a pass runs: kEnds stops before the last (nobody needs its end state but ht, which
// the output pass writes); kOutputs runs them all.
inline int segments_of_pass(const SegmentSplit& sp) { return sp.pass == SegmentSplit::kEnds ? sp.count - 1 : sp.count; }

// A recurrence CTA's work: WorkItem's order without a split; with one, (segment, sequence, head,
// block) with the block fastest, its t0 and len narrowed to the segment's chunks. Segment 0's
// virtual blocks get no chunks (its P is never needed: its start is h0 itself). kReverse (bwd_dhu,
// whose chain runs from the last chunk): segment s covers the chunks forward segment count - 1 - s
// would, so that segment 0 still starts from the given state (dht).
template <bool kReverse = false, class Args>
CUTE_DEVICE WorkItem recurrence_item(const Args& a, int item, const ItemDivisors& divisors) {
  const SegmentSplit& sp = a.split;
  if (sp.pass == SegmentSplit::kNone) return divisors.item(a, item);
  const int blocks = blocks_of_pass(a);
  const int vb = item % blocks, rest = item / blocks;
  WorkItem it(a, (rest / a.HV) % a.num_seqs, rest % a.HV, vb);
  it.seg = rest / a.HV / a.num_seqs;
  const int64_t first = int64_t(kReverse ? sp.count - 1 - it.seg : it.seg) * sp.chunks * 64, most = int64_t(sp.chunks) * 64;
  it.t0 += first;
  it.len = it.len - first < most ? it.len - first : most;
  if (it.len < 0 || (vb >= a.v_blocks && it.seg == 0)) it.len = 0;
  it.nchunks = static_cast<int>((it.len + 63) / 64);
  return it;
}

// Slot s of the split's [N, count, HV, DK, cols] fp32 buffers (starts: cols = V; prods: DK) as
// a state tensor, sequence and head strides as h0's.
template <class Args>
CUTE_DEVICE StateTensor split_slot(const Args& a, float* buf, int s, int dk, int cols) {
  StateTensor t;
  const int64_t head = int64_t(dk) * cols;
  t.data.ptr = buf + int64_t(s) * a.HV * head;
  t.data.dtype = DType::kFloat32;
  t.sn = int64_t(a.split.count) * a.HV * head;
  t.sh = head;
  t.sk = cols;
  t.sv = 1;
  return t;
}

// Where a CTA's state starts: h0 (or 0 when absent), a segment's stitched start, or 0 (the first
// pass's real blocks past segment 0), indexed like h0 (the caller adds its block's first column).
// The virtual blocks start from the identity instead (StateWarpgroup).
CUTE_DEVICE StateTensor start_state(const ChunkFwdArgs& a, const WorkItem& it, int dk) {
  const SegmentSplit& sp = a.split;
  if (sp.pass == SegmentSplit::kNone || it.seg == 0) return a.h0;
  if (sp.pass == SegmentSplit::kOutputs) return split_slot(a, sp.starts, it.seg, dk, a.v_blocks * 64);
  return {};
}

// Where a CTA's end state goes (ptr null: nowhere), fp32: element (k, v) of the block at
// ptr[k * sk + v * sv], v counted from the block's first column.
struct EndState {
  float* ptr = nullptr;
  int64_t sk = 0, sv = 0;
};
CUTE_DEVICE EndState end_state(const ChunkFwdArgs& a, const WorkItem& it, int dk) {
  const SegmentSplit& sp = a.split;
  auto block = [&](float* base, int64_t sn, int64_t sh, int64_t sk, int64_t sv, int col0) {
    return EndState{base + it.n * sn + it.hv * sh + col0 * sv, sk, sv};
  };
  if (sp.pass == SegmentSplit::kEnds) {
    const bool virt = it.vb >= a.v_blocks;
    if (virt && it.seg == 0) return {};
    const StateTensor t = virt ? split_slot(a, sp.prods, it.seg, dk, dk) : split_slot(a, sp.starts, it.seg + 1, dk, a.v_blocks * 64);
    float* base = static_cast<float*>(const_cast<void*>(t.data.ptr));
    return block(base, t.sn, t.sh, t.sk, t.sv, (virt ? it.vb - a.v_blocks : it.vb) * 64);
  }
  if (!a.ht || (sp.pass == SegmentSplit::kOutputs && it.seg != sp.count - 1)) return {};
  return block(a.ht, a.ht_sn, a.ht_sh, a.ht_sk, a.ht_sv, it.vb * 64);
}

// The stitch: starts[n, s + 1, hv] += prods[n, s, hv] starts[n, s, hv] for s = 1 .. count - 2,
// in order (each step reads the start the previous one finished). fp32 on CUDA cores, 2 DK^2 V
// flops a step. Grid (N * HV, V / 16), 256 threads: thread (w, c) = (tid / 16, tid % 16) owns
// rows w, w + 16, ... of the CTA's 16 columns. P (64 KB at DK = 128) comes by cp.async, the next
// step's while this one computes: loaded in the step itself, its latency was most of the step
// (ncu, first version: 8 us a step).
template <int kDK>
__global__ void __launch_bounds__(256) gdn_segment_stitch_kernel(const SegmentSplit sp, int HV, int V) {
  constexpr int kCols = 16, kRowStep = 256 / kCols, kRows = kDK / kRowStep;  // rows a thread
  constexpr int kPieces = kDK * kDK / 4 / 256;                               // P's 16-byte pieces a thread
  extern __shared__ float4 stitch_smem[];
  float* sP = reinterpret_cast<float*>(stitch_smem);  // [2][DK, DK]: prods[s], prods[s + 1]
  float* sE = sP + 2 * kDK * kDK;                     // [DK, 16]: starts[s]'s columns
  const int tid = threadIdx.x, c = tid % kCols, w = tid / kCols;
  const int64_t n = blockIdx.x / HV, hv = blockIdx.x % HV;
  const int64_t start_head = int64_t(kDK) * V, prod_head = int64_t(kDK) * kDK;
  const int64_t slot_start = HV * start_head, slot_prod = HV * prod_head;
  float* starts = sp.starts + (n * sp.count * HV + hv) * start_head + blockIdx.y * kCols;  // slot 0, column c0
  const float* prods = sp.prods + (n * sp.count * HV + hv) * prod_head;
  auto load_p = [&](int s) {  // prods[s] into buffer s % 2
    const float* src = prods + s * slot_prod;
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(sP + (s % 2) * kDK * kDK));
#pragma unroll
    for (int i = 0; i < kPieces; ++i) {
      const int e = (tid + i * 256) * 4;
      copy16(dst + e * 4, src + e, true, true);
    }
    cp_async_commit();
  };
  load_p(1);
#pragma unroll
  for (int i = 0; i < kRows; ++i) sE[(w + kRowStep * i) * kCols + c] = starts[slot_start + (w + kRowStep * i) * V + c];  // starts[1]
  for (int s = 1; s + 1 < sp.count; ++s) {
    float* next = starts + (s + 1) * slot_start;
    float acc[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) acc[i] = next[(w + kRowStep * i) * V + c];  // R_s
    if (s + 2 < sp.count) {
      load_p(s + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // P[s] and starts[s] in shared memory
    const float* P = sP + (s % 2) * kDK * kDK;
#pragma unroll 4
    for (int k = 0; k < kDK; k += 4) {
      const float e0 = sE[k * kCols + c], e1 = sE[(k + 1) * kCols + c], e2 = sE[(k + 2) * kCols + c], e3 = sE[(k + 3) * kCols + c];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const float4 p = *reinterpret_cast<const float4*>(&P[(w + kRowStep * i) * kDK + k]);  // 2 addresses a warp
        acc[i] += p.x * e0 + p.y * e1 + p.z * e2 + p.w * e3;
      }
    }
    __syncthreads();  // every read of this step's P and sE done
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      next[(w + kRowStep * i) * V + c] = acc[i];
      sE[(w + kRowStep * i) * kCols + c] = acc[i];  // the next step's start
    }
  }
}

template <int kDK>
constexpr int stitch_smem_bytes() {
  return (2 * kDK * kDK + kDK * 16) * 4;
}

// The stitch between the two passes, where there is a step to take (count > 2): a CTA per
// (chain's sequence and value head, 16 of V columns). The forward's and bwd_dhu's.
template <int kDK>
cudaError_t launch_segment_stitch(const SegmentSplit& sp, int64_t heads, int HV, int V, cudaStream_t stream) {
  if (sp.count <= 2) return cudaSuccess;
  constexpr int smem = stitch_smem_bytes<kDK>();
  const cudaError_t ok = ensure_dynamic_smem<gdn_segment_stitch_kernel<kDK>>(smem);
  if (ok != cudaSuccess) return ok;
  gdn_segment_stitch_kernel<kDK><<<dim3(static_cast<unsigned>(heads), V / 16), 256, smem, stream>>>(sp, HV, V);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda::gdn
