// python/csrc/flex_ops.cpp — torch.ops.attnkit.flex_fwd / flex_bwd: flex attention with the
// built-in catalog of score/mask mods and torch's BlockMask tensors, through the C++ API.
//
// q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D|Dv] (torch flex_attention's layout) -> out [B, Hq, Sq, Dv],
// lse [B, Hq, Sq] fp32. block_mask: [] (every block visited) or the 4 forward tensors
// (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices; the full_* may be None)
// followed, optionally, by the 4 q-side tensors of the backward.
#include <torch/library.h>

#include "torch_bridge.hpp"

namespace attnkit::torch_ops {
namespace {

using OptTensor = std::optional<at::Tensor>;

struct FlexModTensors {
  OptTensor rel_bias, alibi_slopes, prefix_lengths, document_ids_q, document_ids_kv;
};

FlexMods make_mods(const FlexModTensors& t, double softcap, bool causal, int64_t sliding_window) {
  FlexMods m;
  m.rel_bias = view_of(t.rel_bias, "rel_bias");
  m.alibi_slopes = view_of(t.alibi_slopes, "alibi_slopes");
  m.softcap = softcap;
  m.causal = causal;
  m.prefix_lengths = view_of(t.prefix_lengths, "prefix_lengths");
  m.sliding_window = sliding_window;
  m.document_ids_q = view_of(t.document_ids_q, "document_ids_q");
  m.document_ids_kv = view_of(t.document_ids_kv, "document_ids_kv");
  return m;
}

BlockMaskView make_block_mask(const std::vector<OptTensor>& t, int64_t block_q, int64_t block_k) {
  TORCH_CHECK_VALUE(t.empty() || t.size() == 4 || t.size() == 8,
                    "attnkit.flex: block_mask: expected 0, 4 or 8 tensors (kv_num_blocks, kv_indices, "
                    "full_kv_num_blocks, full_kv_indices[, q_num_blocks, q_indices, full_q_num_blocks, "
                    "full_q_indices]), got ",
                    t.size());
  BlockMaskView b;
  if (t.empty()) return b;
  static const char* names[8] = {"kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                                 "q_num_blocks",  "q_indices",  "full_q_num_blocks",  "full_q_indices"};
  TensorView* views[8] = {&b.kv_num_blocks, &b.kv_indices, &b.full_kv_num_blocks, &b.full_kv_indices,
                          &b.q_num_blocks,  &b.q_indices,  &b.full_q_num_blocks,  &b.full_q_indices};
  for (size_t i = 0; i < t.size(); ++i) *views[i] = view_of(t[i], names[i]);
  TORCH_CHECK_VALUE(b.kv_num_blocks.defined() && b.kv_indices.defined(),
                    "attnkit.flex: block_mask: kv_num_blocks and kv_indices are required");
  b.block_q = block_q;
  b.block_k = block_k;
  return b;
}

void check_ranks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK_VALUE(q.dim() == 4, "attnkit.flex_attention: query: expected 4 dims [B, Hq, Sq, D], got ", q.sizes());
  TORCH_CHECK_VALUE(k.dim() == 4, "attnkit.flex_attention: key: expected 4 dims [B, Hkv, Sk, D], got ", k.sizes());
  TORCH_CHECK_VALUE(v.dim() == 4, "attnkit.flex_attention: value: expected 4 dims [B, Hkv, Sk, Dv], got ",
                    v.sizes());
}

std::tuple<at::Tensor, at::Tensor> flex_fwd(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                            std::optional<double> scale, const OptTensor& rel_bias,
                                            const OptTensor& alibi_slopes, double softcap, bool causal,
                                            const OptTensor& prefix_lengths, int64_t sliding_window,
                                            const OptTensor& document_ids_q, const OptTensor& document_ids_kv,
                                            const std::vector<OptTensor>& block_mask, int64_t block_q,
                                            int64_t block_k, bool deterministic) {
  (void)deterministic;  // a backward option, kept in the schema for autograd
  check_ranks(q_in, k_in, v_in);
  const at::Tensor q = unit_last(q_in), k = unit_last(k_in), v = unit_last(v_in);
  c10::DeviceGuard guard(q.device());
  at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
  FlexFwdParams p;
  p.q = view_of(q, "query");
  p.k = view_of(k, "key");
  p.v = view_of(v, "value");
  p.out = view_of(out, "out");
  p.lse = view_of(lse, "lse");
  p.scale = scale;
  p.mods = make_mods({rel_bias, alibi_slopes, prefix_lengths, document_ids_q, document_ids_kv}, softcap, causal,
                     sliding_window);
  p.block_mask = make_block_mask(block_mask, block_q, block_k);
  p.stream = current_stream(q.device());
  at::Tensor scratch;
  p.workspace = workspace(flex_forward_workspace_size(p), q, scratch);
  check(flex_attention_forward(p), "flex_fwd");
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flex_bwd(
    const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse, std::optional<double> scale, const OptTensor& rel_bias,
    const OptTensor& alibi_slopes, double softcap, bool causal, const OptTensor& prefix_lengths,
    int64_t sliding_window, const OptTensor& document_ids_q, const OptTensor& document_ids_kv,
    const std::vector<OptTensor>& block_mask, int64_t block_q, int64_t block_k, bool deterministic) {
  check_ranks(q_in, k_in, v_in);
  c10::DeviceGuard guard(q_in.device());
  const BackwardTensors t(dout_in, q_in, k_in, v_in, out_in, lse);
  FlexBwdParams p;
  t.fill(p);
  p.scale = scale;
  p.mods = make_mods({rel_bias, alibi_slopes, prefix_lengths, document_ids_q, document_ids_kv}, softcap, causal,
                     sliding_window);
  p.block_mask = make_block_mask(block_mask, block_q, block_k);
  p.deterministic = deterministic;
  p.stream = current_stream(t.q.device());
  at::Tensor scratch;
  p.workspace = workspace(flex_backward_workspace_size(p), t.q, scratch);
  check(flex_attention_backward(p), "flex_bwd");
  return t.grads();
}

// No defaults: a Tensor?[] cannot have one, and the Python mirror passes every argument.
#define ATTNKIT_FLEX_MODS                                                                        \
  "float? scale, Tensor? rel_bias, Tensor? alibi_slopes, float softcap, bool causal, "          \
  "Tensor? prefix_lengths, int sliding_window, Tensor? document_ids_q, Tensor? document_ids_kv, " \
  "Tensor?[] block_mask, int block_q, int block_k, bool deterministic"

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnkit, m) {
  m.set_python_module("attnkit._registrations");
  m.def("flex_fwd(Tensor q, Tensor k, Tensor v, " ATTNKIT_FLEX_MODS ") -> (Tensor out, Tensor lse)");
  m.def("flex_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, " ATTNKIT_FLEX_MODS
        ") -> (Tensor dq, Tensor dk, Tensor dv)");
}

TORCH_LIBRARY_IMPL(attnkit, CPU, m) {
  m.impl("flex_fwd", &flex_fwd);
  m.impl("flex_bwd", &flex_bwd);
}
TORCH_LIBRARY_IMPL(attnkit, CUDA, m) {
  m.impl("flex_fwd", &flex_fwd);
  m.impl("flex_bwd", &flex_bwd);
}

}  // namespace attnkit::torch_ops
