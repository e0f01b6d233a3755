// tools/capi.cpp — a minimal C ABI over the attnkit C++ API for benchmark scripts (ctypes), until
// the PyTorch ops exist. Contiguous tensors only; returns 0 on success, else writes the message.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "attnkit/attnkit.hpp"

namespace {
using namespace attnkit;

int fail(const Status& st, char* err, int errlen) {
  if (err && errlen > 0) std::snprintf(err, static_cast<size_t>(errlen), "%s", st.message().c_str());
  return 1;
}

// Views of a q-like ([.., Sq, Hq, D]) or k-like tensor in the C ABI's layouts (see below).
struct Layout {
  DType dt;
  int layout;  // 0: [B, S, H, D] (or [total, H, D] when varlen); 1: [B, H, S, D] memory
  bool varlen;
  int64_t B;
  TensorView view(void* p, int64_t S, int64_t H, int64_t D) const {
    const Device dev = Device::cuda(0);
    if (varlen) return TensorView::contiguous(p, dt, dev, {S, H, D});
    if (layout == 0) return TensorView::contiguous(p, dt, dev, {B, S, H, D});
    return TensorView::contiguous(p, dt, dev, {B, H, S, D}).transposed(1, 2);
  }
  TensorView lse(void* p, int64_t S, int64_t H) const {
    const Device dev = Device::cuda(0);
    return varlen ? TensorView::contiguous(p, DType::kFloat32, dev, {H, S}) : TensorView::contiguous(p, DType::kFloat32, dev, {B, H, S});
  }
};

// A device buffer of at least `bytes`, kept for the process (single device, calls serialised by
// the caller's stream).
void* workspace(size_t bytes) {
  static void* buf = nullptr;
  static size_t have = 0;
  if (bytes <= have && buf) return buf;
  if (buf) cudaFree(buf);
  have = bytes < 256 ? 256 : bytes;
  if (cudaMalloc(&buf, have) != cudaSuccess) buf = nullptr, have = 0;
  return buf;
}

// The options the forward and backward entry points share (mask, varlen, softcap, scale, stream).
template <class P>
void set_options(P& p, int causal, int top_left, int64_t window_left, int64_t window_right, double softcap, double scale,
                 const int32_t* cu_q, const int32_t* cu_k, int64_t num_seqs, int64_t max_q, int64_t max_k, void* stream) {
  if (cu_q) {
    const Device dev = Device::cuda(0);
    p.cu_seqlens_q = TensorView::contiguous(const_cast<int32_t*>(cu_q), DType::kInt32, dev, {num_seqs + 1});
    p.cu_seqlens_k = TensorView::contiguous(const_cast<int32_t*>(cu_k), DType::kInt32, dev, {num_seqs + 1});
    p.max_seqlen_q = max_q;
    p.max_seqlen_k = max_k;
  }
  p.mask.causal = causal != 0;
  p.mask.align = top_left ? CausalAlign::kTopLeft : CausalAlign::kBottomRight;
  p.mask.window_left = window_left;
  p.mask.window_right = window_right;
  p.softcap = softcap;
  if (scale > 0) p.scale = scale;
  p.stream = stream;
}

}  // namespace

extern "C" {

// layout 0: q/k/v/out contiguous [B, S, H, D] (or [total, H, D] with cu_seqlens);
// layout 1: contiguous [B, H, S, D] (torch SDPA's layout), seen through strides.
int attnkit_c_attention_fwd(void* q, void* k, void* v, void* out, void* lse, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq,
                            int64_t Hkv, int64_t D, int dtype, int layout, int causal, int top_left, int64_t window_left,
                            int64_t window_right, double softcap, double scale, const int32_t* cu_q, const int32_t* cu_k,
                            int64_t num_seqs, int64_t max_q, int64_t max_k, void* stream, char* err, int errlen) {
  const Layout L{dtype == 0 ? DType::kBFloat16 : DType::kFloat16, layout, cu_q != nullptr, B};
  AttentionFwdParams p;
  p.q = L.view(q, Sq, Hq, D);
  p.k = L.view(k, Sk, Hkv, D);
  p.v = L.view(v, Sk, Hkv, D);
  p.out = L.view(out, Sq, Hq, D);
  if (lse) p.lse = L.lse(lse, Sq, Hq);
  set_options(p, causal, top_left, window_left, window_right, softcap, scale, cu_q, cu_k, num_seqs, max_q, max_k, stream);
  p.workspace.bytes = attention_forward_workspace_size(p);
  p.workspace.data = workspace(p.workspace.bytes);
  if (!p.workspace.data) return fail(Status(StatusCode::kBackendError, "cudaMalloc failed"), err, errlen);
  const Status st = attention_forward(p);
  return st.ok() ? 0 : fail(st, err, errlen);
}

// The backward on the same layouts: dout, dq, dk, dv laid out as out, q, k, v; lse as the
// forward wrote it. gqa: how GQA's dK/dV gather the group's query heads — 0 the backend's choice
// (GqaReduction::kAuto), 1 per query head summed in order (kSplit), 2 fp32 atomics (kAtomic),
// 3 packed in one work unit (kPacked).
int attnkit_c_attention_bwd(void* q, void* k, void* v, void* out, void* lse, void* dout, void* dq, void* dk, void* dv, int64_t B,
                            int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D, int dtype, int layout, int causal,
                            int top_left, int64_t window_left, int64_t window_right, double softcap, double scale, const int32_t* cu_q,
                            const int32_t* cu_k, int64_t num_seqs, int64_t max_q, int64_t max_k, int gqa, int deterministic,
                            void* stream, char* err, int errlen) {
  const Layout L{dtype == 0 ? DType::kBFloat16 : DType::kFloat16, layout, cu_q != nullptr, B};
  AttentionBwdParams p;
  p.q = L.view(q, Sq, Hq, D);
  p.k = L.view(k, Sk, Hkv, D);
  p.v = L.view(v, Sk, Hkv, D);
  p.out = L.view(out, Sq, Hq, D);
  p.dout = L.view(dout, Sq, Hq, D);
  p.dq = L.view(dq, Sq, Hq, D);
  p.dk = L.view(dk, Sk, Hkv, D);
  p.dv = L.view(dv, Sk, Hkv, D);
  p.lse = L.lse(lse, Sq, Hq);
  set_options(p, causal, top_left, window_left, window_right, softcap, scale, cu_q, cu_k, num_seqs, max_q, max_k, stream);
  constexpr GqaReduction kByCode[] = {GqaReduction::kAuto, GqaReduction::kSplit, GqaReduction::kAtomic, GqaReduction::kPacked};
  if (gqa < 0 || gqa > 3)
    return fail(InvalidArgument("gqa: expected 0 (auto), 1 (split), 2 (atomic) or 3 (packed), got " + std::to_string(gqa)), err, errlen);
  p.gqa_reduction = kByCode[gqa];
  p.deterministic = deterministic != 0;
  p.workspace.bytes = attention_backward_workspace_size(p);
  p.workspace.data = workspace(p.workspace.bytes);
  if (!p.workspace.data) return fail(Status(StatusCode::kBackendError, "cudaMalloc failed"), err, errlen);
  const Status st = attention_backward(p);
  return st.ok() ? 0 : fail(st, err, errlen);
}

// Gated delta rule decode on contiguous tensors: q, k [N, T, H, D]; v [N, T, HV, D]; g fp32 and
// beta (q's dtype) [N, T, HV]; state fp32 [N, HV, D, D] updated in place; out [N, T, HV, D].
int attnkit_c_gdn_decode(void* q, void* k, void* v, void* g, void* beta, void* state, void* out, int64_t N, int64_t T,
                         int64_t H, int64_t HV, int64_t D, int dtype, int l2norm, void* stream, char* err, int errlen) {
  const DType dt = dtype == 0 ? DType::kBFloat16 : DType::kFloat16;
  const Device dev = Device::cuda(0);
  GdnDecodeParams p;
  p.q = TensorView::contiguous(q, dt, dev, {N, T, H, D});
  p.k = TensorView::contiguous(k, dt, dev, {N, T, H, D});
  p.v = TensorView::contiguous(v, dt, dev, {N, T, HV, D});
  p.g = TensorView::contiguous(g, DType::kFloat32, dev, {N, T, HV});
  p.beta = TensorView::contiguous(beta, dt, dev, {N, T, HV});
  p.state = TensorView::contiguous(state, DType::kFloat32, dev, {N, HV, D, D});
  p.out = TensorView::contiguous(out, dt, dev, {N, T, HV, D});
  p.use_qk_l2norm = l2norm != 0;
  p.stream = stream;
  const Status st = gdn_decode(p);
  return st.ok() ? 0 : fail(st, err, errlen);
}

// The GDN reverse state-gradient pass (bwd_dhu) on contiguous tensors of one dense batch: q, k
// [B, T, H, K]; w [B, T, HV, K]; dout, dv, dv2 [B, T, HV, V]; g fp32 [B, T, HV] or gk fp32
// [B, T, HV, K] (in-chunk cumulative log-decays, base 2 when gates_log2 (FLA's convention), else
// natural; both null: no gate); dht fp32 [B, HV, K, V] or null; dh [B, ceil(T / 64), HV, K, V] in
// q's dtype; dh0 fp32 [B, HV, K, V] or null. scale <= 0: K^-0.5.
int attnkit_c_gdn_bwd_dhu(void* q, void* k, void* w, void* dout, void* dv, void* g, void* gk, int gates_log2, void* dht,
                          void* dh, void* dh0, void* dv2, int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K,
                          int64_t V, int dtype, double scale, int num_segments, void* stream, char* err, int errlen) {
  const DType dt = dtype == 0 ? DType::kBFloat16 : DType::kFloat16;
  const Device dev = Device::cuda(0);
  GdnBwdDhuParams p;
  p.num_segments = num_segments;
  p.q = TensorView::contiguous(q, dt, dev, {B, T, H, K});
  p.k = TensorView::contiguous(k, dt, dev, {B, T, H, K});
  p.w = TensorView::contiguous(w, dt, dev, {B, T, HV, K});
  p.dout = TensorView::contiguous(dout, dt, dev, {B, T, HV, V});
  p.dv = TensorView::contiguous(dv, dt, dev, {B, T, HV, V});
  p.dv2 = TensorView::contiguous(dv2, dt, dev, {B, T, HV, V});
  if (g) p.g = TensorView::contiguous(g, DType::kFloat32, dev, {B, T, HV});
  if (gk) p.gk = TensorView::contiguous(gk, DType::kFloat32, dev, {B, T, HV, K});
  p.gates_log2 = gates_log2 != 0;
  if (dht) p.dht = TensorView::contiguous(dht, DType::kFloat32, dev, {B, HV, K, V});
  p.dh = TensorView::contiguous(dh, dt, dev, {B, (T + 63) / 64, HV, K, V});
  if (dh0) p.dh0 = TensorView::contiguous(dh0, DType::kFloat32, dev, {B, HV, K, V});
  if (scale > 0) p.scale = scale;
  p.stream = stream;
  p.workspace.bytes = gdn_bwd_dhu_workspace_size(p);  // the split's starts and A (few chains), else 0
  p.workspace.data = p.workspace.bytes ? workspace(p.workspace.bytes) : nullptr;
  if (p.workspace.bytes && !p.workspace.data) return fail(Status(StatusCode::kBackendError, "cudaMalloc failed"), err, errlen);
  const Status st = gdn_bwd_dhu(p);
  return st.ok() ? 0 : fail(st, err, errlen);
}

}  // extern "C"
