// attnkit/attention.hpp — softmax attention, forward and backward (spec/attention.md).
//
// Dense: q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv], out [B, Sq, Hq, Dv],
//        lse [B, Hq, Sq] fp32 (optional).
// Varlen (cu_seqlens_q/k given): q [total_q, Hq, D], k/v [total_k, Hkv, D], out [total_q, Hq, Dv],
//        lse [Hq, total_q]; cu_seqlens int32 [N+1], first 0, monotonic, last = total.
// Any strides with unit stride on the last dim. The op runs on the device the tensors are on.
#pragma once
#include <cstddef>
#include <optional>
#include "attnkit/semantics/mask.hpp"
#include "attnkit/status.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {

struct AttentionFwdParams {
  TensorView q, k, v;
  TensorView out;
  TensorView lse;  // optional output, natural log; -inf for rows that see no key
  TensorView cu_seqlens_q, cu_seqlens_k;  // both given => varlen
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // varlen only: upper bounds of the lengths
  std::optional<double> scale;  // default 1/sqrt(D); any finite value (negative, 0: uniform)
  double softcap = 0.0;         // 0 disables
  MaskOptions mask;
  Workspace workspace;
  Stream stream = nullptr;
};

// How dK/dV of a kv head gather the contributions of the query heads of its group.
enum class GqaReduction : uint8_t {
  kAtomic,  // one fp32 accumulator per kv head, added to concurrently, then cast
  kSplit,   // one accumulator per query head, summed afterwards in a fixed order
  kPacked,  // one GPU work unit takes a key tile for every query head of the group and sums in
            // registers, in head order (no fp32 accumulators; the same bits every run). CUDA: the
            // group size (Hq / Hkv) must be a power of two.
  kAuto,    // the backend's choice: on the GPU kPacked where measured faster, else kAtomic (kSplit
            // when deterministic); on the CPU kAtomic (kSplit when deterministic)
};

struct AttentionBwdParams {
  TensorView q, k, v, out, lse, dout;  // lse is required (fp32, layout as the forward)
  TensorView dq, dk, dv;               // outputs, in the dtypes of q, k, v
  TensorView cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  std::optional<double> scale;
  double softcap = 0.0;
  MaskOptions mask;
  GqaReduction gqa_reduction = GqaReduction::kAuto;
  bool deterministic = false;  // bitwise-identical dq/dk/dv run after run
  Workspace workspace;
  Stream stream = nullptr;
};

// Bytes of workspace the op needs for these params on their device (0 when none).
size_t attention_forward_workspace_size(const AttentionFwdParams& p);
size_t attention_backward_workspace_size(const AttentionBwdParams& p);

Status attention_forward(const AttentionFwdParams& p);
Status attention_backward(const AttentionBwdParams& p);

}  // namespace attnkit
