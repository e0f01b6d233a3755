// python/csrc/gdn_ops.cpp — torch.ops.attnkit.gdn_*: the gated delta rule (spec/gdn.md) through
// the C++ API, on the tensors' device.
//
// q, k [B, T, H, K]; v [B, T, HV, V]; beta, g [B, T, HV]; gk [B, T, HV, K]; varlen: B == 1 and
// cu_seqlens int64 [N+1]. States fp32 [N, HV, K, V] ([N, HV, V, K] with state_v_first).
//   gdn_chunk_fwd   -> (out [B, T, HV, V], final_state or an empty tensor when not asked for,
//                       intermediates: uint8 [gdn_intermediates_size()] with keep (1: T alone,
//                       2: everything), what the backward then need not recompute; with keep 0,
//                       or on the CPU, empty; the backward takes them with the same keep)
//   gdn_chunk_bwd   -> gradients of every input given (an empty tensor for those not given)
//   gdn_recurrent   -> the token recurrence on a copy of the state: (out, final_state)
//   gdn_recurrent_  -> decode into a state pool in place (serving): out
//   gdn_bwd_dhu     -> the reverse state-gradient pass alone (attnkit/gdn.hpp): (dh, dh0, dv2)
#include <torch/library.h>

#include "torch_bridge.hpp"

namespace attnkit::torch_ops {
namespace {

using OptTensor = std::optional<at::Tensor>;

// The inputs every GDN op reads, as views of tensors with a unit last stride (kept alive here).
struct GdnTensors {
  at::Tensor q, k, v, beta;
  OptTensor g, gk, A_log, dt_bias, initial_state, cu_seqlens;
  GdnTensors(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const at::Tensor& beta_,
             const OptTensor& g_, const OptTensor& gk_, const OptTensor& A_log_, const OptTensor& dt_bias_,
             const OptTensor& initial_state_, const OptTensor& cu_seqlens_)
      : q(unit_last(q_)), k(unit_last(k_)), v(unit_last(v_)), beta(unit_last(beta_)), g(unit_last(g_)),
        gk(unit_last(gk_)), A_log(A_log_), dt_bias(dt_bias_), initial_state(unit_last(initial_state_)), cu_seqlens(cu_seqlens_) {
    TORCH_CHECK_VALUE(q.dim() == 4, "attnkit.gdn: q: expected 4 dims [B, T, H, K], got ", q.sizes());
    TORCH_CHECK_VALUE(v.dim() == 4, "attnkit.gdn: v: expected 4 dims [B, T, HV, V], got ", v.sizes());
  }
  void fill(GdnInputs& in, std::optional<double> scale, bool state_v_first, bool use_qk_l2norm,
            bool beta_is_logit) const {
    in.q = view_of(q, "q");
    in.k = view_of(k, "k");
    in.v = view_of(v, "v");
    in.beta = view_of(beta, "beta");
    in.g = view_of(g, "g");
    in.gk = view_of(gk, "gk");
    in.A_log = view_of(A_log, "A_log");
    in.dt_bias = view_of(dt_bias, "dt_bias");
    in.initial_state = view_of(initial_state, "initial_state");
    in.cu_seqlens = view_of(cu_seqlens, "cu_seqlens");
    in.scale = scale;
    in.state_layout = state_v_first ? StateLayout::kVK : StateLayout::kKV;
    in.use_qk_l2norm = use_qk_l2norm;
    in.beta_is_logit = beta_is_logit;
  }
  int64_t num_sequences() const { return cu_seqlens ? cu_seqlens->numel() - 1 : q.size(0); }
  // fp32 [N, HV, K, V] or [N, HV, V, K]
  at::Tensor new_state(bool state_v_first) const {
    const int64_t K = q.size(3), V = v.size(3);
    return at::empty({std::max<int64_t>(num_sequences(), 0), v.size(2), state_v_first ? V : K, state_v_first ? K : V},
                     q.options().dtype(at::kFloat));
  }
};

at::Tensor empty_like_or_absent(const OptTensor& t, const at::Tensor& like) {
  return t ? at::empty(t->sizes(), t->options()) : absent_output(like);
}

// The ops' `keep`: 0 nothing kept, 1 T alone (GdnKeep::kT), 2 everything (GdnKeep::kAll).
GdnKeep keep_kind(int64_t keep) {
  TORCH_CHECK_VALUE(keep >= 0 && keep <= 2, "attnkit: keep: expected 0 (nothing), 1 (T) or 2 (all), got ", keep);
  return keep == 1 ? GdnKeep::kT : GdnKeep::kAll;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gdn_chunk_fwd(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta, const OptTensor& g,
    const OptTensor& gk, const OptTensor& A_log, const OptTensor& dt_bias, const OptTensor& initial_state,
    const OptTensor& cu_seqlens, std::optional<double> scale, bool state_v_first, bool use_qk_l2norm,
    bool beta_is_logit, bool output_final_state, int64_t keep) {
  const GdnTensors t(q, k, v, beta, g, gk, A_log, dt_bias, initial_state, cu_seqlens);
  c10::DeviceGuard guard(t.q.device());
  GdnFwdParams p;
  t.fill(p.in, scale, state_v_first, use_qk_l2norm, beta_is_logit);
  at::Tensor out = at::empty({t.q.size(0), t.q.size(1), t.v.size(2), t.v.size(3)}, t.q.options());
  at::Tensor final_state = output_final_state ? t.new_state(state_v_first) : absent_output(t.q);
  p.out = view_of(out, "out");
  if (output_final_state) p.final_state = view_of(final_state, "final_state");
  p.stream = current_stream(t.q.device());
  p.keep = keep_kind(keep);
  const size_t kept = keep ? gdn_intermediates_size(p.in, p.keep) : 0;
  at::Tensor intermediates = at::empty({static_cast<int64_t>(kept)}, t.q.options().dtype(at::kByte));
  if (kept) p.intermediates = {intermediates.data_ptr(), kept};
  at::Tensor scratch;
  p.workspace = workspace(gdn_forward_workspace_size(p), t.q, scratch);
  check(gdn_forward(p), "gdn_chunk_fwd");
  return {out, final_state, intermediates};
}

using GdnGrads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                            at::Tensor>;

GdnGrads gdn_chunk_bwd(const at::Tensor& dout, const OptTensor& dfinal_state, const at::Tensor& q,
                       const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta, const OptTensor& g,
                       const OptTensor& gk, const OptTensor& A_log, const OptTensor& dt_bias,
                       const OptTensor& initial_state, const OptTensor& cu_seqlens, std::optional<double> scale,
                       bool state_v_first, bool use_qk_l2norm, bool beta_is_logit, const OptTensor& intermediates,
                       int64_t keep) {
  const GdnTensors t(q, k, v, beta, g, gk, A_log, dt_bias, initial_state, cu_seqlens);
  const at::Tensor dout_u = unit_last(dout);
  const OptTensor dht = unit_last(dfinal_state);
  c10::DeviceGuard guard(t.q.device());
  GdnBwdParams p;
  t.fill(p.in, scale, state_v_first, use_qk_l2norm, beta_is_logit);
  p.dout = view_of(dout_u, "dout");
  p.dfinal_state = view_of(dht, "dfinal_state");
  at::Tensor dq = at::empty(t.q.sizes(), t.q.options()), dk = at::empty(t.k.sizes(), t.k.options());
  at::Tensor dv = at::empty(t.v.sizes(), t.v.options()), dbeta = at::empty(t.beta.sizes(), t.beta.options());
  at::Tensor dg = t.g ? empty_like_or_absent(t.g, t.q) : empty_like_or_absent(t.gk, t.q);
  at::Tensor dh0 = t.initial_state ? t.new_state(state_v_first) : absent_output(t.q);
  at::Tensor dA_log = empty_like_or_absent(t.A_log, t.q), ddt_bias = empty_like_or_absent(t.dt_bias, t.q);
  p.dq = view_of(dq, "dq");
  p.dk = view_of(dk, "dk");
  p.dv = view_of(dv, "dv");
  p.dbeta = view_of(dbeta, "dbeta");
  if (t.g || t.gk) p.dg = view_of(dg, "dg");
  if (t.initial_state) p.dinitial_state = view_of(dh0, "dinitial_state");
  if (t.A_log) p.dA_log = view_of(dA_log, "dA_log");
  if (t.dt_bias) p.ddt_bias = view_of(ddt_bias, "ddt_bias");
  p.keep = keep_kind(keep);
  if (intermediates && intermediates->numel() > 0) {  // the forward's, with its keep
    TORCH_CHECK_VALUE(keep != 0, "attnkit.gdn_chunk_bwd: keep: the forward's intermediates come with its keep (1 or 2), got 0");
    TORCH_CHECK_VALUE(intermediates->scalar_type() == at::kByte && intermediates->is_contiguous() &&
                          intermediates->device() == t.q.device(),
                      "attnkit.gdn_chunk_bwd: intermediates: expected the forward's contiguous uint8 tensor on q's device");
    p.intermediates = {intermediates->data_ptr(), static_cast<size_t>(intermediates->numel())};
  }
  p.stream = current_stream(t.q.device());
  at::Tensor scratch;
  p.workspace = workspace(gdn_backward_workspace_size(p), t.q, scratch);
  check(gdn_backward(p), "gdn_chunk_bwd");
  return {dq, dk, dv, dbeta, dg, dh0, dA_log, ddt_bias};
}

// Decode into `state` (fp32, a pool when state_indices is given) in place.
at::Tensor run_decode(const GdnTensors& t, const at::Tensor& state, const OptTensor& state_indices,
                      std::optional<double> scale, bool state_v_first, bool use_qk_l2norm, bool beta_is_logit) {
  GdnDecodeParams p;
  GdnInputs in;
  t.fill(in, scale, state_v_first, use_qk_l2norm, beta_is_logit);
  p.q = in.q, p.k = in.k, p.v = in.v, p.beta = in.beta, p.g = in.g, p.gk = in.gk;
  p.A_log = in.A_log, p.dt_bias = in.dt_bias, p.cu_seqlens = in.cu_seqlens;
  p.scale = scale, p.state_layout = in.state_layout;
  p.use_qk_l2norm = use_qk_l2norm, p.beta_is_logit = beta_is_logit;
  p.state = view_of(state, "state");
  p.state_indices = view_of(state_indices, "state_indices");
  at::Tensor out = at::empty({t.q.size(0), t.q.size(1), t.v.size(2), t.v.size(3)}, t.q.options());
  p.out = view_of(out, "out");
  p.stream = current_stream(t.q.device());
  check(gdn_decode(p), "gdn_recurrent");
  return out;
}

std::tuple<at::Tensor, at::Tensor> gdn_recurrent(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 const at::Tensor& beta, const OptTensor& g, const OptTensor& gk,
                                                 const OptTensor& A_log, const OptTensor& dt_bias,
                                                 const OptTensor& initial_state, const OptTensor& cu_seqlens,
                                                 std::optional<double> scale, bool state_v_first, bool use_qk_l2norm,
                                                 bool beta_is_logit) {
  const GdnTensors t(q, k, v, beta, g, gk, A_log, dt_bias, std::nullopt, cu_seqlens);
  c10::DeviceGuard guard(t.q.device());
  at::Tensor state = t.new_state(state_v_first);
  if (initial_state) {
    TORCH_CHECK_VALUE(initial_state->sizes() == state.sizes(), "attnkit.gdn_recurrent: initial_state: expected ",
                      state.sizes(), " ([N, HV, K, V], or [N, HV, V, K] with state_v_first), got ",
                      initial_state->sizes());
    state.copy_(*initial_state);
  } else {
    state.zero_();
  }
  at::Tensor out = run_decode(t, state, std::nullopt, scale, state_v_first, use_qk_l2norm, beta_is_logit);
  return {out, state};
}

at::Tensor gdn_recurrent_(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& beta,
                          const at::Tensor& state, const OptTensor& g, const OptTensor& gk, const OptTensor& A_log, const OptTensor& dt_bias,
                          const OptTensor& state_indices, const OptTensor& cu_seqlens,
                          std::optional<double> scale, bool state_v_first, bool use_qk_l2norm, bool beta_is_logit) {
  const GdnTensors t(q, k, v, beta, g, gk, A_log, dt_bias, std::nullopt, cu_seqlens);
  c10::DeviceGuard guard(t.q.device());
  return run_decode(t, state, state_indices, scale, state_v_first, use_qk_l2norm, beta_is_logit);
}

// Chunks of 64 over all sequences: ceil(T / 64), or summed per sequence when varlen (the offsets
// are read on the host: a copy for device tensors; malformed ones are reported by the C++ API).
int64_t num_chunks(const at::Tensor& q, const OptTensor& cu_seqlens) {
  constexpr int64_t kChunk = 64;
  if (!cu_seqlens) return (q.size(1) + kChunk - 1) / kChunk;
  const at::Tensor offsets = cu_seqlens->to(at::TensorOptions().device(at::kCPU).dtype(at::kLong)).contiguous();
  const int64_t* o = offsets.const_data_ptr<int64_t>();
  int64_t chunks = 0;
  for (int64_t i = 0; i + 1 < offsets.numel(); ++i) chunks += (std::max<int64_t>(o[i + 1] - o[i], 0) + kChunk - 1) / kChunk;
  return chunks;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gdn_bwd_dhu_op(const at::Tensor& q, const at::Tensor& k, const at::Tensor& w,
                                                           const at::Tensor& dout, const at::Tensor& dv,
                                                           const OptTensor& g, const OptTensor& gk, const OptTensor& dht,
                                                           const OptTensor& cu_seqlens, std::optional<double> scale,
                                                           bool state_v_first, bool output_dh0, bool gates_log2) {
  TORCH_CHECK_VALUE(q.dim() == 4, "attnkit.gdn_bwd_dhu: q: expected 4 dims [B, T, H, K], got ", q.sizes());
  TORCH_CHECK_VALUE(dout.dim() == 4, "attnkit.gdn_bwd_dhu: dout: expected 4 dims [B, T, HV, V], got ", dout.sizes());
  c10::DeviceGuard guard(q.device());
  const int64_t K = q.size(3), HV = dout.size(2), V = dout.size(3);
  const int64_t rows = state_v_first ? V : K, cols = state_v_first ? K : V;
  const int64_t n = cu_seqlens ? cu_seqlens->numel() - 1 : q.size(0);
  at::Tensor dh = at::empty({q.size(0), num_chunks(q, cu_seqlens), HV, rows, cols}, q.options());
  at::Tensor dh0 = output_dh0 ? at::empty({std::max<int64_t>(n, 0), HV, rows, cols}, q.options().dtype(at::kFloat))
                              : absent_output(q);
  at::Tensor dv2 = at::empty(dv.sizes(), dv.options());
  const at::Tensor q_u = unit_last(q), k_u = unit_last(k), w_u = unit_last(w), dout_u = unit_last(dout),
                   dv_u = unit_last(dv);
  const OptTensor g_u = unit_last(g), gk_u = unit_last(gk), dht_u = unit_last(dht);
  GdnBwdDhuParams p;
  p.q = view_of(q_u, "q");
  p.k = view_of(k_u, "k");
  p.w = view_of(w_u, "w");
  p.dout = view_of(dout_u, "dout");
  p.dv = view_of(dv_u, "dv");
  p.g = view_of(g_u, "g");
  p.gk = view_of(gk_u, "gk");
  p.gates_log2 = gates_log2;
  p.dht = view_of(dht_u, "dht");
  p.cu_seqlens = view_of(cu_seqlens, "cu_seqlens");
  p.scale = scale;
  p.state_layout = state_v_first ? StateLayout::kVK : StateLayout::kKV;
  p.dh = view_of(dh, "dh");
  if (output_dh0) p.dh0 = view_of(dh0, "dh0");
  p.dv2 = view_of(dv2, "dv2");
  p.stream = current_stream(q.device());
  at::Tensor scratch;
  p.workspace = workspace(gdn_bwd_dhu_workspace_size(p), q, scratch);
  check(::attnkit::gdn_bwd_dhu(p), "gdn_bwd_dhu");
  return {dh, dh0, dv2};
}

#define ATTNKIT_GDN_INPUTS                                                                             \
  "Tensor q, Tensor k, Tensor v, Tensor beta, Tensor? g=None, Tensor? gk=None, Tensor? A_log=None, " \
  "Tensor? dt_bias=None, "
#define ATTNKIT_GDN_OPTIONS \
  "float? scale=None, bool state_v_first=False, bool use_qk_l2norm=False, bool beta_is_logit=False"

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnkit, m) {
  m.set_python_module("attnkit._registrations");
  m.def("gdn_chunk_fwd(" ATTNKIT_GDN_INPUTS "Tensor? initial_state=None, Tensor? cu_seqlens=None, " ATTNKIT_GDN_OPTIONS
        ", bool output_final_state=False, int keep=0) -> (Tensor out, Tensor final_state, "
        "Tensor intermediates)");
  m.def("gdn_chunk_bwd(Tensor dout, Tensor? dfinal_state, " ATTNKIT_GDN_INPUTS
        "Tensor? initial_state=None, Tensor? cu_seqlens=None, " ATTNKIT_GDN_OPTIONS
        ", Tensor? intermediates=None, int keep=0) -> (Tensor dq, Tensor dk, Tensor dv, Tensor dbeta, Tensor dg, Tensor dinitial_state, Tensor dA_log, "
        "Tensor ddt_bias)");
  m.def("gdn_recurrent(" ATTNKIT_GDN_INPUTS "Tensor? initial_state=None, Tensor? cu_seqlens=None, " ATTNKIT_GDN_OPTIONS
        ") -> (Tensor out, Tensor final_state)");
  m.def("gdn_recurrent_(Tensor q, Tensor k, Tensor v, Tensor beta, Tensor(a!) state, Tensor? g=None, Tensor? gk=None, "
        "Tensor? A_log=None, Tensor? dt_bias=None, Tensor? state_indices=None, Tensor? cu_seqlens=None, "
        ATTNKIT_GDN_OPTIONS ") -> Tensor out");
  m.def("gdn_bwd_dhu(Tensor q, Tensor k, Tensor w, Tensor dout, Tensor dv, Tensor? g=None, Tensor? gk=None, "
        "Tensor? dht=None, Tensor? cu_seqlens=None, float? scale=None, bool state_v_first=False, "
        "bool output_dh0=False, bool gates_log2=False) -> (Tensor dh, Tensor dh0, Tensor dv2)");
}

TORCH_LIBRARY_IMPL(attnkit, CPU, m) {
  m.impl("gdn_chunk_fwd", &gdn_chunk_fwd);
  m.impl("gdn_chunk_bwd", &gdn_chunk_bwd);
  m.impl("gdn_recurrent", &gdn_recurrent);
  m.impl("gdn_recurrent_", &gdn_recurrent_);
  m.impl("gdn_bwd_dhu", &gdn_bwd_dhu_op);
}
TORCH_LIBRARY_IMPL(attnkit, CUDA, m) {
  m.impl("gdn_chunk_fwd", &gdn_chunk_fwd);
  m.impl("gdn_chunk_bwd", &gdn_chunk_bwd);
  m.impl("gdn_recurrent", &gdn_recurrent);
  m.impl("gdn_recurrent_", &gdn_recurrent_);
  m.impl("gdn_bwd_dhu", &gdn_bwd_dhu_op);
}

}  // namespace attnkit::torch_ops
