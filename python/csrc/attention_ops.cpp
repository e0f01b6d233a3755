// python/csrc/attention_ops.cpp — torch.ops.attnkit.attention_fwd / attention_bwd: softmax
// attention on the tensors' device (CPU reference or the Hopper kernels) through the C++ API.
//
// Dense: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D|Dv] -> out [B, Sq, Hq, Dv], lse [B, Hq, Sq] fp32.
// Varlen (cu_seqlens_q/k int32 [N+1]): q [total_q, Hq, D] -> out [total_q, Hq, Dv], lse [Hq, total_q].
#include <torch/library.h>

#include "torch_bridge.hpp"

namespace attnkit::torch_ops {
namespace {

// The options both directions share, set on AttentionFwdParams or AttentionBwdParams.
template <class P>
void set_options(P& p, const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_k,
                 int64_t max_seqlen_q, int64_t max_seqlen_k, std::optional<double> scale, bool causal,
                 bool causal_top_left, int64_t window_left, int64_t window_right, double softcap) {
  p.cu_seqlens_q = view_of(cu_seqlens_q, "cu_seqlens_q");
  p.cu_seqlens_k = view_of(cu_seqlens_k, "cu_seqlens_k");
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.scale = scale;
  p.softcap = softcap;
  p.mask.causal = causal;
  p.mask.align = causal_top_left ? CausalAlign::kTopLeft : CausalAlign::kBottomRight;
  p.mask.window_left = window_left;
  p.mask.window_right = window_right;
}

// q, k, v must agree in rank (4 dense, 3 varlen) before output shapes can be derived from them.
void check_ranks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool varlen) {
  const int64_t rank = varlen ? 3 : 4;
  const char* layout = varlen ? "[total, H, D] (varlen)" : "[B, S, H, D]";
  TORCH_CHECK_VALUE(q.dim() == rank, "attnkit.attention: q: expected ", rank, " dims ", layout, ", got ", q.sizes());
  TORCH_CHECK_VALUE(k.dim() == rank, "attnkit.attention: k: expected ", rank, " dims ", layout, ", got ", k.sizes());
  TORCH_CHECK_VALUE(v.dim() == rank, "attnkit.attention: v: expected ", rank, " dims ", layout, ", got ", v.sizes());
}

std::tuple<at::Tensor, at::Tensor> attention_fwd(
    const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, std::optional<double> scale, bool causal, bool causal_top_left,
    int64_t window_left, int64_t window_right, double softcap, bool deterministic, bool split_gqa) {
  (void)deterministic, (void)split_gqa;  // backward options, kept in the schema for autograd
  const bool varlen = cu_seqlens_q.has_value() || cu_seqlens_k.has_value();
  check_ranks(q_in, k_in, v_in, varlen);
  const at::Tensor q = unit_last(q_in), k = unit_last(k_in), v = unit_last(v_in);
  c10::DeviceGuard guard(q.device());
  std::vector<int64_t> out_shape = q.sizes().vec();
  out_shape.back() = v.size(-1);
  at::Tensor out = at::empty(out_shape, q.options());
  // lse: [B, Hq, Sq] or [Hq, total_q]
  at::Tensor lse = varlen ? at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat))
                          : at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  AttentionFwdParams p;
  p.q = view_of(q, "q");
  p.k = view_of(k, "k");
  p.v = view_of(v, "v");
  p.out = view_of(out, "out");
  p.lse = view_of(lse, "lse");
  set_options(p, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, causal_top_left, window_left,
              window_right, softcap);
  p.stream = current_stream(q.device());
  at::Tensor scratch;
  p.workspace = workspace(attention_forward_workspace_size(p), q, scratch);
  check(attention_forward(p), "attention_fwd");
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd(
    const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse, const std::optional<at::Tensor>& cu_seqlens_q,
    const std::optional<at::Tensor>& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    std::optional<double> scale, bool causal, bool causal_top_left, int64_t window_left, int64_t window_right,
    double softcap, bool deterministic, bool split_gqa) {
  const bool varlen = cu_seqlens_q.has_value() || cu_seqlens_k.has_value();
  check_ranks(q_in, k_in, v_in, varlen);
  c10::DeviceGuard guard(q_in.device());
  const BackwardTensors t(dout_in, q_in, k_in, v_in, out_in, lse);
  AttentionBwdParams p;
  t.fill(p);
  set_options(p, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, causal_top_left, window_left,
              window_right, softcap);
  p.deterministic = deterministic;
  p.gqa_reduction = split_gqa ? GqaReduction::kSplit : GqaReduction::kAuto;
  p.stream = current_stream(t.q.device());
  at::Tensor scratch;
  p.workspace = workspace(attention_backward_workspace_size(p), t.q, scratch);
  check(attention_backward(p), "attention_bwd");
  return t.grads();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnkit, m) {
  m.set_python_module("attnkit._registrations");
  m.def(
      "attention_fwd(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, "
      "int max_seqlen_q=0, int max_seqlen_k=0, float? scale=None, bool causal=False, bool causal_top_left=False, "
      "int window_left=-1, int window_right=-1, float softcap=0.0, bool deterministic=False, "
      "bool split_gqa=False) -> (Tensor out, Tensor lse)");
  m.def(
      "attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, int max_seqlen_q=0, int max_seqlen_k=0, "
      "float? scale=None, bool causal=False, bool causal_top_left=False, int window_left=-1, "
      "int window_right=-1, float softcap=0.0, bool deterministic=False, bool split_gqa=False) "
      "-> (Tensor dq, Tensor dk, Tensor dv)");
}

TORCH_LIBRARY_IMPL(attnkit, CPU, m) {
  m.impl("attention_fwd", &attention_fwd);
  m.impl("attention_bwd", &attention_bwd);
}
TORCH_LIBRARY_IMPL(attnkit, CUDA, m) {
  m.impl("attention_fwd", &attention_fwd);
  m.impl("attention_bwd", &attention_bwd);
}

}  // namespace attnkit::torch_ops
