// src/api/validate_gdn.cpp — validation of gated delta rule params (spec/gdn.md).
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/cpu/io.hpp"
#include "attnkit/validate.hpp"
#include "src/api/checks.hpp"

namespace attnkit {
namespace {
using namespace checks;

struct GdnShape {
  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0, N = 0;
};

// The tensors the forward, backward and decode all read.
struct GdnArgs {
  const TensorView &q, &k, &v, &beta, &g, &gk, &A_log, &dt_bias, &cu_seqlens;
  const std::optional<double>& scale;
};

Status check_inputs(const GdnArgs& a, GdnShape& s) {
  ATTNKIT_RETURN_IF_ERROR(defined(a.q, "q"));
  const Device dev = a.q.device;
  ATTNKIT_RETURN_IF_ERROR(float_tensor(a.q, "q", 4, "[B, T, H, K]", dev));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(a.k, "k", 4, "[B, T, H, K]", dev));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(a.v, "v", 4, "[B, T, HV, V]", dev));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(a.k, "k", a.q, "q"));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(a.v, "v", a.q, "q"));
  s.B = a.q.size(0);
  s.T = a.q.size(1);
  s.H = a.q.size(2);
  s.K = a.q.size(3);
  s.HV = a.v.size(2);
  s.V = a.v.size(3);
  ATTNKIT_RETURN_IF_ERROR(shape_is(a.k, "k", {s.B, s.T, s.H, s.K}, "[B, T, H, K] (as q)"));
  ATTNKIT_RETURN_IF_ERROR(size_is(a.v, "v", 0, s.B, "B (q.size(0))"));
  ATTNKIT_RETURN_IF_ERROR(size_is(a.v, "v", 1, s.T, "T (q.size(1))"));
  ATTNKIT_RETURN_IF_ERROR(in_range(s.K, "q (head dim K)", 1, 256));
  ATTNKIT_RETURN_IF_ERROR(in_range(s.V, "v (head dim V)", 1, 256));
  ATTNKIT_RETURN_IF_ERROR(at_least(s.H, "q (head count H)", 1));
  ATTNKIT_RETURN_IF_ERROR(divisible(s.HV, "v (value head count HV)", s.H, "H, the q/k head count"));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(a.beta, "beta", 3, "[B, T, HV]", dev));
  ATTNKIT_RETURN_IF_ERROR(shape_is(a.beta, "beta", {s.B, s.T, s.HV}, "[B, T, HV]"));
  if (a.g.defined() && a.gk.defined())
    return InvalidArgument("gk: give either the scalar gate g or the per-key gate gk, not both");
  if (a.g.defined()) {
    ATTNKIT_RETURN_IF_ERROR(float_tensor(a.g, "g", 3, "[B, T, HV]", dev));
    ATTNKIT_RETURN_IF_ERROR(shape_is(a.g, "g", {s.B, s.T, s.HV}, "[B, T, HV]"));
  }
  if (a.gk.defined()) {
    ATTNKIT_RETURN_IF_ERROR(float_tensor(a.gk, "gk", 4, "[B, T, HV, K]", dev));
    ATTNKIT_RETURN_IF_ERROR(shape_is(a.gk, "gk", {s.B, s.T, s.HV, s.K}, "[B, T, HV, K]"));
  }
  if (a.A_log.defined() != a.dt_bias.defined())
    return InvalidArgument(std::string(a.A_log.defined() ? "dt_bias" : "A_log") +
                           ": the fused gate needs both A_log and dt_bias");
  if (a.A_log.defined()) {
    if (!a.g.defined()) return InvalidArgument("g: the fused gate (A_log, dt_bias) needs the raw scalar gate g");
    ATTNKIT_RETURN_IF_ERROR(float_tensor(a.A_log, "A_log", 1, "[HV]", dev));
    ATTNKIT_RETURN_IF_ERROR(float_tensor(a.dt_bias, "dt_bias", 1, "[HV]", dev));
    ATTNKIT_RETURN_IF_ERROR(size_is(a.A_log, "A_log", 0, s.HV, "HV"));
    ATTNKIT_RETURN_IF_ERROR(size_is(a.dt_bias, "dt_bias", 0, s.HV, "HV"));
  }
  if (a.scale) ATTNKIT_RETURN_IF_ERROR(finite(*a.scale, "scale"));
  s.N = s.B;
  if (a.cu_seqlens.defined()) {
    if (s.B != 1)
      return InvalidArgument("q: varlen (cu_seqlens given) expects B == 1, got q of shape " + shape_str(a.q));
    ATTNKIT_RETURN_IF_ERROR(on_device(a.cu_seqlens, "cu_seqlens", dev));
    ATTNKIT_RETURN_IF_ERROR(cu_seqlens(a.cu_seqlens, "cu_seqlens", {DType::kInt64}, s.T, "T (q.size(1))", 0, ""));
    s.N = a.cu_seqlens.size(0) - 1;
  }
  return Status::Ok();
}

// A state tensor [N, HV, K, V] (kKV) or [N, HV, V, K] (kVK).
Status check_state(const TensorView& t, const char* name, int64_t n, const GdnShape& s, StateLayout layout,
                   const Device& dev, bool fp32_only) {
  const bool kv = layout == StateLayout::kKV;
  const char* lay = kv ? "[N, HV, K, V]" : "[N, HV, V, K]";
  ATTNKIT_RETURN_IF_ERROR(defined(t, name));
  ATTNKIT_RETURN_IF_ERROR(dims(t, name, 4, lay));
  if (fp32_only) ATTNKIT_RETURN_IF_ERROR(dtype_in(t, name, {DType::kFloat32, DType::kFloat64}));
  else ATTNKIT_RETURN_IF_ERROR(float_dtype(t, name));
  ATTNKIT_RETURN_IF_ERROR(on_device(t, name, dev));
  ATTNKIT_RETURN_IF_ERROR(non_negative_strides(t, name));
  ATTNKIT_RETURN_IF_ERROR(data_present(t, name));
  return shape_is(t, name, {n, s.HV, kv ? s.K : s.V, kv ? s.V : s.K}, lay);
}

Status check_same_shape(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name,
                        const Device& dev) {
  ATTNKIT_RETURN_IF_ERROR(float_tensor(t, name, ref.ndim, "(as its input)", dev));
  for (int d = 0; d < ref.ndim; ++d)
    if (t.sizes[d] != ref.sizes[d])
      return InvalidArgument(std::string(name) + ": expected the shape of " + ref_name + " " + shape_str(ref) +
                             ", got " + shape_str(t));
  return Status::Ok();
}

// The sequence split's segment count (GdnFwdParams / GdnBwdParams / GdnBwdDhuParams::num_segments).
Status num_segments(int n) {
  if (n >= 0) return Status::Ok();
  return InvalidArgument("num_segments: expected 0 (automatic), 1 (no split) or a segment count, got " + std::to_string(n));
}

// The forward's kept intermediates: absent, or exactly gdn_intermediates_size(in, keep) bytes (a
// buffer sized for other inputs, or for the other GdnKeep, is caught here), 256-byte aligned.
Status intermediates(const Workspace& w, const GdnInputs& in, GdnKeep keep) {
  if (keep != GdnKeep::kAll && keep != GdnKeep::kT)
    return InvalidArgument("keep: expected GdnKeep::kAll or GdnKeep::kT, got " + std::to_string(static_cast<int>(keep)));
  if (!w.data) return Status::Ok();
  const size_t need = gdn_intermediates_size(in, keep);
  if (need == 0)
    return InvalidArgument("intermediates: nothing is kept for these inputs on this backend "
                           "(gdn_intermediates_size() is 0): pass none");
  if (w.bytes != need)
    return InvalidArgument("intermediates: expected gdn_intermediates_size() = " + std::to_string(need) +
                           " bytes (keep = " + (keep == GdnKeep::kT ? "kT" : "kAll") +
                           "), from the forward of these same inputs; got " + std::to_string(w.bytes));
  if (reinterpret_cast<uintptr_t>(w.data) % 256 != 0)
    return InvalidArgument("intermediates: expected a 256-byte aligned pointer");
  return Status::Ok();
}

GdnArgs args_of(const GdnInputs& in) {
  return {in.q, in.k, in.v, in.beta, in.g, in.gk, in.A_log, in.dt_bias, in.cu_seqlens, in.scale};
}

}  // namespace

Status validate(const GdnFwdParams& p) {
  GdnShape s;
  ATTNKIT_RETURN_IF_ERROR(check_inputs(args_of(p.in), s));
  const Device dev = p.in.q.device;
  ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.out, "out", p.in.v, "v", dev));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(p.out, "out", p.in.q, "q"));
  if (p.in.initial_state.defined())
    ATTNKIT_RETURN_IF_ERROR(check_state(p.in.initial_state, "initial_state", s.N, s, p.in.state_layout, dev, false));
  if (p.final_state.defined())
    ATTNKIT_RETURN_IF_ERROR(check_state(p.final_state, "final_state", s.N, s, p.in.state_layout, dev, true));
  ATTNKIT_RETURN_IF_ERROR(intermediates(p.intermediates, p.in, p.keep));
  ATTNKIT_RETURN_IF_ERROR(num_segments(p.num_segments));
  return workspace(p.workspace, gdn_forward_workspace_size(p));
}

Status validate(const GdnBwdParams& p) {
  GdnShape s;
  const GdnInputs& in = p.in;
  ATTNKIT_RETURN_IF_ERROR(check_inputs(args_of(in), s));
  const Device dev = in.q.device;
  if (in.initial_state.defined())
    ATTNKIT_RETURN_IF_ERROR(check_state(in.initial_state, "initial_state", s.N, s, in.state_layout, dev, false));
  ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.dout, "dout", in.v, "v", dev));
  if (p.dfinal_state.defined())
    ATTNKIT_RETURN_IF_ERROR(check_state(p.dfinal_state, "dfinal_state", s.N, s, in.state_layout, dev, false));
  ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.dq, "dq", in.q, "q", dev));
  ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.dk, "dk", in.k, "k", dev));
  ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.dv, "dv", in.v, "v", dev));
  ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.dbeta, "dbeta", in.beta, "beta", dev));
  if (in.g.defined()) ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.dg, "dg", in.g, "g", dev));
  if (in.gk.defined()) ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.dg, "dg", in.gk, "gk", dev));
  if (in.initial_state.defined())
    ATTNKIT_RETURN_IF_ERROR(check_state(p.dinitial_state, "dinitial_state", s.N, s, in.state_layout, dev, true));
  if (in.A_log.defined()) {
    ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.dA_log, "dA_log", in.A_log, "A_log", dev));
    ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.ddt_bias, "ddt_bias", in.dt_bias, "dt_bias", dev));
  }
  ATTNKIT_RETURN_IF_ERROR(intermediates(p.intermediates, in, p.keep));
  ATTNKIT_RETURN_IF_ERROR(num_segments(p.num_segments));
  return workspace(p.workspace, gdn_backward_workspace_size(p));
}

Status validate(const GdnDecodeParams& p) {
  GdnShape s;
  ATTNKIT_RETURN_IF_ERROR(check_inputs({p.q, p.k, p.v, p.beta, p.g, p.gk, p.A_log, p.dt_bias, p.cu_seqlens, p.scale}, s));
  const Device dev = p.q.device;
  ATTNKIT_RETURN_IF_ERROR(check_same_shape(p.out, "out", p.v, "v", dev));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(p.out, "out", p.q, "q"));
  ATTNKIT_RETURN_IF_ERROR(defined(p.state, "state"));
  const int64_t pool = p.state.ndim == 4 ? p.state.size(0) : 0;
  ATTNKIT_RETURN_IF_ERROR(check_state(p.state, "state", p.state_indices.defined() ? pool : s.N, s, p.state_layout, dev, true));
  if (!p.state_indices.defined()) return Status::Ok();
  ATTNKIT_RETURN_IF_ERROR(dims(p.state_indices, "state_indices", 1, "[N]"));
  ATTNKIT_RETURN_IF_ERROR(dtype_in(p.state_indices, "state_indices", {DType::kInt32, DType::kInt64}));
  ATTNKIT_RETURN_IF_ERROR(on_device(p.state_indices, "state_indices", dev));
  ATTNKIT_RETURN_IF_ERROR(size_is(p.state_indices, "state_indices", 0, s.N, "N, the number of sequences"));
  if (!host_readable(p.state_indices)) return Status::Ok();
  std::vector<char> used(static_cast<size_t>(pool), 0);
  for (int64_t n = 0; n < s.N; ++n) {
    const int64_t i = cpu::load_index(p.state_indices, n);
    if (i >= pool)
      return InvalidArgument("state_indices: expected slots < " + std::to_string(pool) + " (state.size(0)), got " +
                             std::to_string(i) + " for sequence " + std::to_string(n));
    if (i >= 0 && used[i]++)
      return InvalidArgument("state_indices: slot " + std::to_string(i) +
                             " is used by two sequences; each sequence needs its own state");
  }
  return Status::Ok();
}

}  // namespace attnkit

namespace attnkit {
namespace {

// Chunks of 64 over the sequences: ceil(T / 64) for dense input, the sum over sequences for varlen
// (-1 when the offsets are on the device and cannot be read).
int64_t num_chunks(const TensorView& cu, int64_t T) {
  constexpr int64_t kChunk = 64;
  if (!cu.defined()) return (T + kChunk - 1) / kChunk;
  if (!checks::host_readable(cu)) return -1;
  int64_t n = 0;
  for (int64_t i = 0; i + 1 < cu.size(0); ++i)
    n += (cpu::load_index(cu, i + 1) - cpu::load_index(cu, i) + kChunk - 1) / kChunk;
  return n;
}

}  // namespace

Status validate(const GdnBwdDhuParams& p) {
  using namespace checks;
  ATTNKIT_RETURN_IF_ERROR(defined(p.q, "q"));
  const Device dev = p.q.device;
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.q, "q", 4, "[B, T, H, K]", dev));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.k, "k", 4, "[B, T, H, K]", dev));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(p.k, "k", p.q, "q"));
  const int64_t B = p.q.size(0), T = p.q.size(1), H = p.q.size(2), K = p.q.size(3);
  ATTNKIT_RETURN_IF_ERROR(shape_is(p.k, "k", {B, T, H, K}, "[B, T, H, K] (as q)"));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.dout, "dout", 4, "[B, T, HV, V]", dev));
  const int64_t HV = p.dout.size(2), V = p.dout.size(3);
  ATTNKIT_RETURN_IF_ERROR(size_is(p.dout, "dout", 0, B, "B (q.size(0))"));
  ATTNKIT_RETURN_IF_ERROR(size_is(p.dout, "dout", 1, T, "T (q.size(1))"));
  ATTNKIT_RETURN_IF_ERROR(in_range(K, "q (head dim K)", 1, 256));
  ATTNKIT_RETURN_IF_ERROR(in_range(V, "dout (head dim V)", 1, 256));
  ATTNKIT_RETURN_IF_ERROR(at_least(H, "q (head count H)", 1));
  ATTNKIT_RETURN_IF_ERROR(divisible(HV, "dout (value head count HV)", H, "H, the q/k head count"));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.w, "w", 4, "[B, T, HV, K]", dev));
  ATTNKIT_RETURN_IF_ERROR(shape_is(p.w, "w", {B, T, HV, K}, "[B, T, HV, K]"));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.dv, "dv", 4, "[B, T, HV, V]", dev));
  ATTNKIT_RETURN_IF_ERROR(shape_is(p.dv, "dv", {B, T, HV, V}, "[B, T, HV, V] (as dout)"));
  if (p.g.defined() && p.gk.defined()) return InvalidArgument("gk: give either the scalar gate g or the per-key gate gk, not both");
  if (p.g.defined()) {
    ATTNKIT_RETURN_IF_ERROR(float_tensor(p.g, "g", 3, "[B, T, HV]", dev));
    ATTNKIT_RETURN_IF_ERROR(shape_is(p.g, "g", {B, T, HV}, "[B, T, HV]"));
  }
  if (p.gk.defined()) {
    ATTNKIT_RETURN_IF_ERROR(float_tensor(p.gk, "gk", 4, "[B, T, HV, K]", dev));
    ATTNKIT_RETURN_IF_ERROR(shape_is(p.gk, "gk", {B, T, HV, K}, "[B, T, HV, K]"));
  }
  if (p.scale) ATTNKIT_RETURN_IF_ERROR(finite(*p.scale, "scale"));
  int64_t N = B;
  if (p.cu_seqlens.defined()) {
    if (B != 1) return InvalidArgument("q: varlen (cu_seqlens given) expects B == 1, got q of shape " + shape_str(p.q));
    ATTNKIT_RETURN_IF_ERROR(on_device(p.cu_seqlens, "cu_seqlens", dev));
    ATTNKIT_RETURN_IF_ERROR(cu_seqlens(p.cu_seqlens, "cu_seqlens", {DType::kInt64}, T, "T (q.size(1))", 0, ""));
    N = p.cu_seqlens.size(0) - 1;
  }
  const bool kv = p.state_layout == StateLayout::kKV;
  const int64_t r = kv ? K : V, c = kv ? V : K;
  const char* slay = kv ? "[N, HV, K, V]" : "[N, HV, V, K]";
  auto state = [&](const TensorView& t, const char* name, bool fp32) -> Status {
    ATTNKIT_RETURN_IF_ERROR(float_tensor(t, name, 4, slay, dev));
    if (fp32) ATTNKIT_RETURN_IF_ERROR(dtype_in(t, name, {DType::kFloat32, DType::kFloat64}));
    return shape_is(t, name, {N, HV, r, c}, slay);
  };
  if (p.dht.defined()) ATTNKIT_RETURN_IF_ERROR(state(p.dht, "dht", false));
  if (p.dh0.defined()) ATTNKIT_RETURN_IF_ERROR(state(p.dh0, "dh0", true));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.dv2, "dv2", 4, "[B, T, HV, V]", dev));
  ATTNKIT_RETURN_IF_ERROR(shape_is(p.dv2, "dv2", {B, T, HV, V}, "[B, T, HV, V] (as dv)"));
  const char* dlay = kv ? "[B, NT, HV, K, V]" : "[B, NT, HV, V, K]";
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.dh, "dh", 5, dlay, dev));
  const int64_t nt = num_chunks(p.cu_seqlens, T);
  if (nt >= 0) ATTNKIT_RETURN_IF_ERROR(shape_is(p.dh, "dh", {B, nt, HV, r, c}, dlay));
  ATTNKIT_RETURN_IF_ERROR(num_segments(p.num_segments));
  return workspace(p.workspace, gdn_bwd_dhu_workspace_size(p));
}

}  // namespace attnkit
