// src/cuda/gdn/chunk_fwd_dispatch.cu — GdnFwdParams -> the chunked forward instantiation for its
// (dtype, key head dim), after the checks only the GPU path has; and the workspace it needs.
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include <cmath>
#include <string>

#include "src/cuda/gdn/api.hpp"
#include "src/cuda/cuda_status.hpp"
#include "src/cuda/runtime.hpp"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_plan.hpp"
#include "src/cuda/gdn/chunk_host.hpp"
#include "src/cuda/gdn/host_tensors.hpp"
#include "src/cuda/unit_strides.hpp"

namespace attnkit::cuda {
namespace gdn {
template <class Element, int kDK>
cudaError_t launch_gdn_chunk_fwd(const ChunkFwdArgs& a, cudaStream_t stream);

SplitPlan plan_split_for(const GdnInputs& in, int requested) {
  if (in.cu_seqlens.defined()) return {};
  return plan_split((in.q.size(1) + 63) / 64, in.q.size(0) * in.v.size(2), in.v.size(3) / 64, in.q.size(3) / 64,
                    current_device_sm_count(), requested);
}

Status check_chunked_supported(const GdnInputs& in) {
  const int64_t K = in.q.size(3), V = in.v.size(3);
  if (in.algorithm != GdnAlgorithm::kChunked)
    return Unsupported("algorithm: the token recurrence is the CPU reference; the CUDA forward is chunked");
  if (in.gk.defined()) return Unsupported("gk: the CUDA chunked forward takes the scalar gate g (the per-key gate runs on the CPU)");
  if (in.q.dtype != DType::kBFloat16 && in.q.dtype != DType::kFloat16)
    return Unsupported("q: the CUDA chunked forward takes bfloat16 or float16 q, k, v");
  if (K != V || (K != 64 && K != 128))
    return Unsupported("q: the CUDA chunked forward needs K = V in {64, 128}, got K = " + std::to_string(K) +
                       ", V = " + std::to_string(V));
  for (auto [t, name] : {std::pair{&in.q, "q"}, std::pair{&in.k, "k"}, std::pair{&in.v, "v"}})
    if (t->strides[3] != 1) return InvalidArgument(std::string(name) + ": expected unit stride on the last dim");
  if (in.A_log.defined() && (in.A_log.dtype != DType::kFloat32 || in.dt_bias.dtype != DType::kFloat32))
    return Unsupported("A_log: the CUDA chunked forward takes float32 A_log and dt_bias");
  return Status::Ok();
}

Status chunk_forward_args(const GdnInputs& in, ChunkFwdArgs& a) {
  const int64_t K = in.q.size(3), V = in.v.size(3);
  const bool varlen = in.cu_seqlens.defined();
  a.q = row_tensor(in.q, varlen);
  a.k = row_tensor(in.k, varlen);
  a.v = row_tensor(in.v, varlen);
  a.g = token_tensor(in.g, varlen);
  a.beta = token_tensor(in.beta, varlen);
  if (in.A_log.defined()) {
    a.A_log = static_cast<const float*>(in.A_log.data);
    a.dt_bias = static_cast<const float*>(in.dt_bias.data);
    a.a_stride = in.A_log.strides[0];
    a.dt_stride = in.dt_bias.strides[0];
  }
  a.h0 = state_tensor(in.initial_state, in.state_layout);
  a.cu_seqlens = varlen ? static_cast<const int64_t*>(in.cu_seqlens.data) : nullptr;
  a.tokens = in.q.size(1);
  const int64_t seqs = varlen ? in.cu_seqlens.size(0) - 1 : in.q.size(0);
  if (seqs * in.v.size(2) * (V / 64) > INT32_MAX) return Unsupported("q: more than 2^31 - 1 (sequence, value head, value block) items");
  a.num_seqs = static_cast<int>(seqs);
  a.H = static_cast<int>(in.q.size(2));
  a.HV = static_cast<int>(in.v.size(2));
  a.v_blocks = static_cast<int>(V / 64);
  a.scale = static_cast<float>(in.scale ? *in.scale : 1.0 / std::sqrt(static_cast<double>(K)));
  a.l2norm = in.use_qk_l2norm;
  a.beta_logit = in.beta_is_logit;
  a.vec16 = rows_aligned(in.q, varlen, 16) && rows_aligned(in.k, varlen, 16) && rows_aligned(in.v, varlen, 16);
  a.wy_slots = wy_slot_count(a.tokens, seqs, varlen);
  if (a.wy_slots > INT32_MAX || a.HV > 65535) return Unsupported("q: more than 2^31 - 1 chunks or 65535 value heads per call");
  return Status::Ok();
}

Status launch_chunk_forward(const ChunkFwdArgs& a, DType dtype, int64_t K, cudaStream_t stream) {
  const bool bf16 = dtype == DType::kBFloat16;
  cudaError_t err;
  if (K == 128) err = bf16 ? launch_gdn_chunk_fwd<cutlass::bfloat16_t, 128>(a, stream) : launch_gdn_chunk_fwd<cutlass::half_t, 128>(a, stream);
  else err = bf16 ? launch_gdn_chunk_fwd<cutlass::bfloat16_t, 64>(a, stream) : launch_gdn_chunk_fwd<cutlass::half_t, 64>(a, stream);
  return cuda_status(err, "gdn_forward");
}
}  // namespace gdn

namespace {

Status check_supported(const GdnFwdParams& p) { return gdn::check_chunked_supported(p.in); }

// Inference at K = 128 with 16-byte aligned rows and enough recurrence CTAs: w and u are formed
// in the recurrence kernel from the WY kernel's [Tu | Tw] rows (in w's place) and never stored
// (ChunkFwdArgs). That saves WY-kernel time in proportion to the batch's tokens x heads but adds
// ~0.15 us to each chunk of every CTA's serial chain (the w / u GEMMs share its SM's tensor
// cores), so it pays only with many (sequence, head) chains: measured on an H200 at T = 8192
// (docs/perf/gdn_chunk_fwd.md, v8), 128 CTAs -6 to -9%, 64 CTAs +1 to +2%, 32 CTAs +5%.
bool wu_in_recurrence(const GdnFwdParams& p) {
  const bool varlen = p.in.cu_seqlens.defined();
  const int64_t seqs = varlen ? p.in.cu_seqlens.size(0) - 1 : p.in.q.size(0);
  const int64_t items = seqs * p.in.v.size(2) * (p.in.v.size(3) / 64);
  const bool keeps_all = p.intermediates.data != nullptr && p.keep == GdnKeep::kAll;
  return !keeps_all && p.in.q.size(3) == 128 && items >= gdn::kWuInRecurrenceChains && gdn::rows_aligned(p.in.q, varlen, 16) &&
         gdn::rows_aligned(p.in.k, varlen, 16) && gdn::rows_aligned(p.in.v, varlen, 16);
}

// The WY kernel's results, one row per token (B * T rows; varlen B = 1): w [rows, HV, K] and
// u [rows, HV, V] in q's dtype, gamma [B, HV, T] fp32; each buffer 256-byte aligned. With the
// caller's intermediates (a training forward) w and gamma live there and only u here; with
// w and u formed in the recurrence, w's rows hold [Tu | Tw] and there is no u. A forward keeping T
// alone (GdnKeep::kT) runs as inference does, with T written to the caller's buffer besides.
struct ChunkWorkspace {
  int64_t rows = 0, HV = 0, K = 0, V = 0;
  bool wu = false;  // wu_in_recurrence(p): the one decision both the size and the launch follow
  gdn::SplitPlan split;  // plan_split_for(p.in, ...), likewise; then the segments' starts and P^T (fp32) too
  size_t w = 0, u = 0, gamma = 0, starts = 0, prods = 0, total = 0;
  explicit ChunkWorkspace(const GdnFwdParams& p) {
    if (!check_supported(p).ok()) return;
    rows = p.in.q.size(0) * p.in.q.size(1);
    HV = p.in.v.size(2);
    K = p.in.q.size(3);
    V = p.in.v.size(3);
    const int64_t e = dtype_size(p.in.q.dtype);
    gdn::BufferLayout at;
    const bool kept = p.intermediates.data != nullptr && p.keep == GdnKeep::kAll;
    if (!kept) w = at.take(rows * HV * K * e);
    split = gdn::plan_split_for(p.in, p.num_segments);
    wu = split.count == 1 && wu_in_recurrence(p);
    if (!wu) u = at.take(rows * HV * V * e);
    if (!kept) gamma = at.take(rows * HV * 4);
    if (split.count > 1) {
      const int64_t slots = p.in.q.size(0) * split.count * HV;
      starts = at.take(slots * K * V * 4);
      prods = at.take(slots * K * K * 4);
    }
    total = at.total;
  }
};

}  // namespace

size_t gdn_forward_workspace_size(const GdnFwdParams& p) { return ChunkWorkspace(p).total; }

size_t gdn_intermediates_size(const GdnInputs& in, GdnKeep keep) {
  if (!gdn::check_chunked_supported(in).ok()) return 0;
  gdn::BufferLayout at;
  (void)gdn::Intermediates(in, at, true, keep == GdnKeep::kAll, keep == GdnKeep::kT);
  return at.total;
}

Status gdn_forward(const GdnFwdParams& caller) {
  GdnFwdParams p = caller;
  normalize_unit_strides(p.in.q, p.in.k, p.in.v, p.out);
  ATTNKIT_RETURN_IF_ERROR(check_supported(p));
  const GdnInputs& in = p.in;
  const int64_t K = in.q.size(3);
  if (p.out.strides[3] != 1) return InvalidArgument("out: expected unit stride on the last dim");
  if (p.out.dtype != in.q.dtype) return InvalidArgument("out: expected q's dtype");

  const bool varlen = in.cu_seqlens.defined();
  gdn::ChunkFwdArgs a;
  ATTNKIT_RETURN_IF_ERROR(gdn::chunk_forward_args(in, a));
  a.o = gdn::row_tensor(p.out, varlen);
  a.o_vec16 = gdn::rows_aligned(p.out, varlen, 16);
  if (p.final_state.defined()) {
    a.ht = static_cast<float*>(p.final_state.data);
    a.ht_sn = p.final_state.strides[0];
    a.ht_sh = p.final_state.strides[1];
    gdn::state_strides(p.final_state, in.state_layout, a.ht_sk, a.ht_sv);
  }

  const ChunkWorkspace ws(p);
  if (reinterpret_cast<uintptr_t>(p.workspace.data) % 256 != 0)
    return InvalidArgument("workspace: the CUDA chunked forward needs a 256-byte aligned device pointer");
  char* base = static_cast<char*>(p.workspace.data);
  const int64_t T = in.q.size(1);
  a.wu_in_recurrence = ws.wu;
  if (ws.split.count > 1) {
    a.split.count = ws.split.count;
    a.split.chunks = ws.split.chunks;
    a.split.starts = reinterpret_cast<float*>(base + ws.starts);
    a.split.prods = reinterpret_cast<float*>(base + ws.prods);
  }
  if (!ws.wu) a.u = {base + ws.u, T * ws.HV * ws.V, ws.HV * ws.V, ws.V};
  const bool keeps_all = p.intermediates.data && p.keep == GdnKeep::kAll;
  if (keeps_all) {  // a training forward: the WY pieces, T, v_new and start states kept
    gdn::BufferLayout at;
    gdn::Intermediates(in, at).point(a, static_cast<char*>(p.intermediates.data));
  } else {
    a.w = {base + ws.w, T * ws.HV * K, ws.HV * K, K};
    a.gamma = {base + ws.gamma, T * ws.HV, 1, T};  // [B, HV, T]: a chunk's rows of one head contiguous
  }
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (p.intermediates.data && p.keep == GdnKeep::kT) {  // T and varlen the backward's slot tables (the
    gdn::BufferLayout at;                                 // WY kernel), with the in-op l2norm the inverse norms (the recurrence)
    gdn::Intermediates(in, at, true, false, true).point(a, static_cast<char*>(p.intermediates.data));
  }
  return gdn::launch_chunk_forward(a, in.q.dtype, K, stream);
}

}  // namespace attnkit::cuda
