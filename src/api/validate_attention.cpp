// src/api/validate_attention.cpp — validation of softmax attention params (spec/attention.md).
#include <string>

#include "attnkit/validate.hpp"
#include "src/api/checks.hpp"

namespace attnkit {
namespace {
using namespace checks;

constexpr int64_t kMaxHeadDim = 512;

// The geometry every attention call shares, read off q/k/v after their checks.
struct AttnShape {
  bool varlen = false;
  int64_t B = 0, Sq = 0, Sk = 0, Hq = 0, Hkv = 0, D = 0, Dv = 0;
};

template <class P>
Status check_qkv(const P& p, AttnShape& s) {
  s.varlen = p.cu_seqlens_q.defined() || p.cu_seqlens_k.defined();
  if (s.varlen) {
    ATTNKIT_RETURN_IF_ERROR(defined(p.cu_seqlens_q, "cu_seqlens_q"));
    ATTNKIT_RETURN_IF_ERROR(defined(p.cu_seqlens_k, "cu_seqlens_k"));
  }
  ATTNKIT_RETURN_IF_ERROR(defined(p.q, "q"));
  const Device dev = p.q.device;
  const int nd = s.varlen ? 3 : 4;
  const char* ql = s.varlen ? "[total_q, Hq, D]" : "[B, Sq, Hq, D]";
  const char* kl = s.varlen ? "[total_k, Hkv, D]" : "[B, Sk, Hkv, D]";
  const char* vl = s.varlen ? "[total_k, Hkv, Dv]" : "[B, Sk, Hkv, Dv]";
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.q, "q", nd, ql, dev));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.k, "k", nd, kl, dev));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.v, "v", nd, vl, dev));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(p.k, "k", p.q, "q"));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(p.v, "v", p.q, "q"));
  const int o = s.varlen ? 0 : 1;  // offset of the seq dim
  s.B = s.varlen ? p.cu_seqlens_q.size(0) - 1 : p.q.size(0);
  s.Sq = p.q.size(o);
  s.Sk = p.k.size(o);
  s.Hq = p.q.size(o + 1);
  s.Hkv = p.k.size(o + 1);
  s.D = p.q.size(o + 2);
  s.Dv = p.v.size(o + 2);
  if (!s.varlen) {
    ATTNKIT_RETURN_IF_ERROR(size_is(p.k, "k", 0, s.B, "B (q.size(0))"));
    ATTNKIT_RETURN_IF_ERROR(size_is(p.v, "v", 0, s.B, "B (q.size(0))"));
  }
  ATTNKIT_RETURN_IF_ERROR(size_is(p.v, "v", o, s.Sk, s.varlen ? "total_k (k.size(0))" : "Sk (k.size(1))"));
  ATTNKIT_RETURN_IF_ERROR(size_is(p.v, "v", o + 1, s.Hkv, "Hkv (k's head count)"));
  ATTNKIT_RETURN_IF_ERROR(size_is(p.k, "k", o + 2, s.D, "D (q's head dim)"));
  ATTNKIT_RETURN_IF_ERROR(in_range(s.D, "q (head dim D)", 1, kMaxHeadDim));
  ATTNKIT_RETURN_IF_ERROR(in_range(s.Dv, "v (head dim Dv)", 1, kMaxHeadDim));
  ATTNKIT_RETURN_IF_ERROR(at_least(s.Hkv, "k (head count Hkv)", 1));
  ATTNKIT_RETURN_IF_ERROR(divisible(s.Hq, "q (head count Hq)", s.Hkv, "Hkv, the kv head count"));
  if (s.varlen) {
    ATTNKIT_RETURN_IF_ERROR(on_device(p.cu_seqlens_q, "cu_seqlens_q", dev));
    ATTNKIT_RETURN_IF_ERROR(on_device(p.cu_seqlens_k, "cu_seqlens_k", dev));
    ATTNKIT_RETURN_IF_ERROR(at_least(p.max_seqlen_q, "max_seqlen_q", 0));
    ATTNKIT_RETURN_IF_ERROR(at_least(p.max_seqlen_k, "max_seqlen_k", 0));
    ATTNKIT_RETURN_IF_ERROR(cu_seqlens(p.cu_seqlens_q, "cu_seqlens_q", {DType::kInt32}, s.Sq, "total_q (q.size(0))",
                                       p.max_seqlen_q, "max_seqlen_q"));
    ATTNKIT_RETURN_IF_ERROR(cu_seqlens(p.cu_seqlens_k, "cu_seqlens_k", {DType::kInt32}, s.Sk, "total_k (k.size(0))",
                                       p.max_seqlen_k, "max_seqlen_k"));
    ATTNKIT_RETURN_IF_ERROR(size_is(p.cu_seqlens_k, "cu_seqlens_k", 0, s.B + 1, "N+1 (cu_seqlens_q.size(0))"));
  }
  return Status::Ok();
}

// out-like tensors: [B, Sq, Hq, Dv] / [total_q, Hq, Dv] in q's dtype.
Status check_like(const TensorView& t, const char* name, const TensorView& ref, const char* ref_name,
                  const TensorView& dtype_ref, const char* dtype_ref_name, const Device& dev) {
  ATTNKIT_RETURN_IF_ERROR(float_tensor(t, name, ref.ndim, ref.ndim == 4 ? "[B, S, H, D]" : "[total, H, D]", dev));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(t, name, dtype_ref, dtype_ref_name));
  for (int d = 0; d < ref.ndim; ++d)
    if (t.sizes[d] != ref.sizes[d])
      return InvalidArgument(std::string(name) + ": expected the shape of " + ref_name + " " + shape_str(ref) +
                             ", got " + shape_str(t));
  return Status::Ok();
}

Status check_lse(const TensorView& lse, const AttnShape& s, const Device& dev) {
  ATTNKIT_RETURN_IF_ERROR(dtype_in(lse, "lse", {DType::kFloat32}));
  ATTNKIT_RETURN_IF_ERROR(on_device(lse, "lse", dev));
  ATTNKIT_RETURN_IF_ERROR(non_negative_strides(lse, "lse"));
  ATTNKIT_RETURN_IF_ERROR(data_present(lse, "lse"));
  if (s.varlen) return shape_is(lse, "lse", {s.Hq, s.Sq}, "[Hq, total_q]");
  return shape_is(lse, "lse", {s.B, s.Hq, s.Sq}, "[B, Hq, Sq]");
}

template <class P>
Status check_options(const P& p) {
  ATTNKIT_RETURN_IF_ERROR(at_least(p.mask.window_left, "mask.window_left", -1));
  ATTNKIT_RETURN_IF_ERROR(at_least(p.mask.window_right, "mask.window_right", -1));
  ATTNKIT_RETURN_IF_ERROR(finite(p.softcap, "softcap"));
  if (p.softcap < 0) return InvalidArgument("softcap: expected a value >= 0 (0 disables it), got " + std::to_string(p.softcap));
  if (p.scale) ATTNKIT_RETURN_IF_ERROR(finite(*p.scale, "scale"));
  return Status::Ok();
}

}  // namespace

Status validate(const AttentionFwdParams& p) {
  AttnShape s;
  ATTNKIT_RETURN_IF_ERROR(check_qkv(p, s));
  const Device dev = p.q.device;
  TensorView out_ref = p.q;  // out has q's shape with Dv as the last dim
  out_ref.sizes[out_ref.ndim - 1] = s.Dv;
  ATTNKIT_RETURN_IF_ERROR(check_like(p.out, "out", out_ref, "q (with Dv)", p.q, "q", dev));
  if (p.lse.defined()) ATTNKIT_RETURN_IF_ERROR(check_lse(p.lse, s, dev));
  ATTNKIT_RETURN_IF_ERROR(check_options(p));
  return workspace(p.workspace, attention_forward_workspace_size(p));
}

Status validate(const AttentionBwdParams& p) {
  AttnShape s;
  ATTNKIT_RETURN_IF_ERROR(check_qkv(p, s));
  const Device dev = p.q.device;
  TensorView out_ref = p.q;
  out_ref.sizes[out_ref.ndim - 1] = s.Dv;
  ATTNKIT_RETURN_IF_ERROR(check_like(p.out, "out", out_ref, "q (with Dv)", p.q, "q", dev));
  ATTNKIT_RETURN_IF_ERROR(check_like(p.dout, "dout", out_ref, "out", p.q, "q", dev));
  ATTNKIT_RETURN_IF_ERROR(defined(p.lse, "lse"));
  ATTNKIT_RETURN_IF_ERROR(check_lse(p.lse, s, dev));
  ATTNKIT_RETURN_IF_ERROR(check_like(p.dq, "dq", p.q, "q", p.q, "q", dev));
  ATTNKIT_RETURN_IF_ERROR(check_like(p.dk, "dk", p.k, "k", p.k, "k", dev));
  ATTNKIT_RETURN_IF_ERROR(check_like(p.dv, "dv", p.v, "v", p.v, "v", dev));
  ATTNKIT_RETURN_IF_ERROR(check_options(p));
  if (static_cast<int>(p.gqa_reduction) > static_cast<int>(GqaReduction::kAuto))
    return InvalidArgument("gqa_reduction: expected kAtomic, kSplit, kPacked or kAuto, got " +
                           std::to_string(static_cast<int>(p.gqa_reduction)));
  return workspace(p.workspace, attention_backward_workspace_size(p));
}

}  // namespace attnkit
