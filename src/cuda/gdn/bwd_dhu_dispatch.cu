// src/cuda/gdn/bwd_dhu_dispatch.cu — GdnBwdDhuParams -> the bwd_dhu instantiation for its (dtype,
// key head dim, value block), after the checks only the GPU path has; and its workspace (varlen:
// the first global chunk of each sequence, dh's chunk axis).
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include <cmath>
#include <cub/block/block_scan.cuh>
#include <string>

#include "src/cuda/cuda_status.hpp"
#include "src/cuda/gdn/api.hpp"
#include "src/cuda/gdn/bwd_dhu_args.cuh"
#include "src/cuda/gdn/chunk_host.hpp"
#include "src/cuda/gdn/host_tensors.hpp"
#include "src/cuda/unit_strides.hpp"
#include "src/cuda/runtime.hpp"

namespace attnkit::cuda {
namespace gdn {
template <class Element, int kDK, int kBV>
cudaError_t launch_gdn_bwd_dhu(const BwdDhuArgs& a, cudaStream_t stream);

// offsets[n] = sum over m < n of ceil(len_m / 64): one CTA scanning 256 sequences at a time.
constexpr int kOffsetThreads = 256;
__global__ void __launch_bounds__(kOffsetThreads) gdn_chunk_offsets_kernel(const int64_t* cu, int64_t n, int64_t* offsets) {
  using Scan = cub::BlockScan<int64_t, kOffsetThreads>;
  __shared__ typename Scan::TempStorage temp;
  int64_t carry = 0;  // chunks of the sequences before this round's (the same in every thread)
  for (int64_t base = 0; base < n; base += kOffsetThreads) {
    const int64_t m = base + threadIdx.x;
    const int64_t chunks = m < n ? (cu[m + 1] - cu[m] + 63) / 64 : 0;
    int64_t before, total;
    Scan(temp).ExclusiveSum(chunks, before, total);
    if (m < n) offsets[m] = carry + before;
    carry += total;
    __syncthreads();  // temp is reused by the next round
  }
}

DhuPlan plan_bwd_dhu_for(int64_t nchunks, int64_t pairs, int64_t K, int64_t V, bool dense, int requested) {
  return plan_bwd_dhu(nchunks, pairs, K, V, current_device_sm_count(), requested, dense);
}

template <class Element, int kDK>
cudaError_t launch_for_block(const BwdDhuArgs& a, int bv, cudaStream_t stream) {
  if (bv == 16) return launch_gdn_bwd_dhu<Element, kDK, 16>(a, stream);
  if (bv == 32) return launch_gdn_bwd_dhu<Element, kDK, 32>(a, stream);
  return launch_gdn_bwd_dhu<Element, kDK, 64>(a, stream);
}

Status launch_bwd_dhu(BwdDhuArgs a, DType dtype, int64_t K, int64_t V, const DhuPlan& plan, cudaStream_t stream) {
  // One CTA per (sequence, value head, value block), each a chain of chunks (or of a segment's).
  const int64_t pairs = int64_t(a.num_seqs) * a.HV;
  const int bv = plan.bv;
  if (pairs * (V / bv) > INT32_MAX) return Unsupported("q: more than 2^31 - 1 (sequence, value head, value block) items");
  a.v_blocks = static_cast<int>(V / bv);
  SegmentSplit split;  // the plan's split where the rows take it (TMA boxes: a virtual block's lie past V)
  if (plan.split.count > 1 && a.vec16 && !a.cu_seqlens) {
    split.count = plan.split.count;
    split.chunks = plan.split.chunks;
    split.starts = a.split.starts;
    split.prods = a.split.prods;
  }
  a.split = split;
  using bf16 = cutlass::bfloat16_t;
  using fp16 = cutlass::half_t;
  const bool b16 = dtype == DType::kBFloat16;
  cudaError_t err;
  if (K == 128) err = b16 ? launch_for_block<bf16, 128>(a, bv, stream) : launch_for_block<fp16, 128>(a, bv, stream);
  else err = b16 ? launch_for_block<bf16, 64>(a, bv, stream) : launch_for_block<fp16, 64>(a, bv, stream);
  return cuda_status(err, "gdn_bwd_dhu");
}
}  // namespace gdn

namespace {

bool is16(DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; }

Status check_supported(const GdnBwdDhuParams& p) {
  const int64_t K = p.q.size(3), V = p.dout.size(3);
  if (!is16(p.q.dtype)) return Unsupported("q: the CUDA bwd_dhu takes bfloat16 or float16 q, k, w, dout, dv");
  for (auto [t, name] : {std::pair{&p.k, "k"}, std::pair{&p.w, "w"}, std::pair{&p.dout, "dout"}, std::pair{&p.dv, "dv"},
                         std::pair{&p.dv2, "dv2"}, std::pair{&p.dh, "dh"}})
    if (t->dtype != p.q.dtype) return Unsupported(std::string(name) + ": the CUDA bwd_dhu expects q's dtype");
  if (K != 64 && K != 128) return Unsupported("q: the CUDA bwd_dhu needs K in {64, 128}, got " + std::to_string(K));
  if (V % 64 != 0) return Unsupported("dout: the CUDA bwd_dhu needs V a multiple of 64, got " + std::to_string(V));
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.w, "w"}, std::pair{&p.dout, "dout"},
                         std::pair{&p.dv, "dv"}, std::pair{&p.dv2, "dv2"}})
    if (t->strides[3] != 1) return InvalidArgument(std::string(name) + ": expected unit stride on the last dim");
  const TensorView& gate = p.g.defined() ? p.g : p.gk;
  if (gate.defined() && gate.dtype != DType::kFloat32)
    return Unsupported(std::string(p.g.defined() ? "g" : "gk") + ": the CUDA bwd_dhu takes float32 gates");
  if (p.gk.defined() && p.gk.strides[3] != 1) return InvalidArgument("gk: expected unit stride on the last dim");
  if (p.dh0.defined() && p.dh0.dtype != DType::kFloat32) return Unsupported("dh0: the CUDA bwd_dhu writes float32 dh0");
  return Status::Ok();
}

int64_t num_seqs(const GdnBwdDhuParams& p) { return p.cu_seqlens.defined() ? p.cu_seqlens.size(0) - 1 : p.q.size(0); }

// The workspace: varlen, the first global chunk of each sequence; with the sequence split, its
// segments' starts [N, count, HV, K, V] and A [N, count, HV, K, K] (fp32).
struct DhuWorkspace {
  gdn::DhuPlan plan;
  size_t offsets = 0, starts = 0, prods = 0, total = 0;
  explicit DhuWorkspace(const GdnBwdDhuParams& caller) {
    GdnBwdDhuParams p = caller;  // as gdn_bwd_dhu sees it
    normalize_unit_strides(p.q, p.k, p.w, p.dout, p.dv, p.dv2);
    if (!check_supported(p).ok()) return;
    const bool varlen = p.cu_seqlens.defined();
    const int64_t K = p.q.size(3), V = p.dout.size(3), HV = p.dout.size(2), seqs = num_seqs(p);
    plan = gdn::plan_bwd_dhu_for((p.q.size(1) + 63) / 64, seqs * HV, K, V, !varlen, p.num_segments);
    gdn::BufferLayout at;
    if (varlen) offsets = at.take(seqs * 8);
    if (plan.split.count > 1) {
      starts = at.take(seqs * plan.split.count * HV * K * V * 4);
      prods = at.take(seqs * plan.split.count * HV * K * K * 4);
    }
    total = at.total;
  }
};

}  // namespace

size_t gdn_bwd_dhu_workspace_size(const GdnBwdDhuParams& p) { return DhuWorkspace(p).total; }

Status gdn_bwd_dhu(const GdnBwdDhuParams& caller) {
  GdnBwdDhuParams p = caller;
  normalize_unit_strides(p.q, p.k, p.w, p.dout, p.dv, p.dv2);
  ATTNKIT_RETURN_IF_ERROR(check_supported(p));
  const bool varlen = p.cu_seqlens.defined();
  const int64_t K = p.q.size(3), V = p.dout.size(3), HV = p.dout.size(2), seqs = num_seqs(p);
  if (seqs * HV > INT32_MAX) return Unsupported("q: more than 2^31 - 1 (sequence, value head) items");

  gdn::BwdDhuArgs a;
  a.q = gdn::row_tensor(p.q, varlen);
  a.k = gdn::row_tensor(p.k, varlen);
  a.w = gdn::row_tensor(p.w, varlen);
  a.dout = gdn::row_tensor(p.dout, varlen);
  a.dv = gdn::row_tensor(p.dv, varlen);
  a.dv2 = gdn::row_tensor(p.dv2, varlen);
  const TensorView& gate = p.g.defined() ? p.g : p.gk;
  if (gate.defined()) {
    a.gate = static_cast<const float*>(gate.data);
    a.g_sb = varlen ? 0 : gate.strides[0];
    a.g_st = gate.strides[1];
    a.g_sh = gate.strides[2];
    a.per_key_gate = p.gk.defined();
    if (p.gates_log2) a.gate_log2 = 1.f;  // the kernel works in log2 units
  }
  a.dht = gdn::state_tensor(p.dht, p.state_layout);
  a.dh = p.dh.data;
  a.dh_sb = varlen ? 0 : p.dh.strides[0];
  a.dh_sc = p.dh.strides[1];
  a.dh_sh = p.dh.strides[2];
  gdn::state_strides(p.dh, p.state_layout, a.dh_sk, a.dh_sv);
  a.dh_chunks = static_cast<int>(p.dh.size(1));
  a.dh_batch = static_cast<int>(p.dh.size(0));
  a.dh_vec16 = a.dh_sv == 1 && reinterpret_cast<uintptr_t>(p.dh.data) % 16 == 0 &&
               (a.dh_sb % 8 | a.dh_sc % 8 | a.dh_sh % 8 | a.dh_sk % 8) == 0;
  if (p.dh0.defined()) {
    a.dh0 = static_cast<float*>(p.dh0.data);
    a.dh0_sn = p.dh0.strides[0];
    a.dh0_sh = p.dh0.strides[1];
    gdn::state_strides(p.dh0, p.state_layout, a.dh0_sk, a.dh0_sv);
  }
  a.tokens = p.q.size(1);
  a.num_seqs = static_cast<int>(seqs);
  a.H = static_cast<int>(p.q.size(2));
  a.HV = static_cast<int>(HV);
  a.scale = static_cast<float>(p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(K)));
  a.vec16 = gdn::rows_aligned(p.q, varlen, 16) && gdn::rows_aligned(p.k, varlen, 16) && gdn::rows_aligned(p.w, varlen, 16) &&
            gdn::rows_aligned(p.dout, varlen, 16) && gdn::rows_aligned(p.dv, varlen, 16);
  a.dv2_vec16 = gdn::rows_aligned(p.dv2, varlen, 16);

  auto stream = static_cast<cudaStream_t>(p.stream);
  const DhuWorkspace ws(p);
  char* base = static_cast<char*>(p.workspace.data);
  if (ws.total > 0 && reinterpret_cast<uintptr_t>(base) % 256 != 0)
    return InvalidArgument("workspace: the CUDA bwd_dhu needs a 256-byte aligned device pointer");
  if (varlen && seqs > 0) {
    a.cu_seqlens = static_cast<const int64_t*>(p.cu_seqlens.data);
    auto* offsets = reinterpret_cast<int64_t*>(base + ws.offsets);
    a.chunk_offsets = offsets;
    gdn::gdn_chunk_offsets_kernel<<<1, gdn::kOffsetThreads, 0, stream>>>(a.cu_seqlens, seqs, offsets);
    ATTNKIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "gdn_bwd_dhu"));
  }
  if (ws.plan.split.count > 1) {
    a.split.starts = reinterpret_cast<float*>(base + ws.starts);
    a.split.prods = reinterpret_cast<float*>(base + ws.prods);
  }
  return gdn::launch_bwd_dhu(a, p.q.dtype, K, V, ws.plan, stream);
}

}  // namespace attnkit::cuda
