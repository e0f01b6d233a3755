// tools/capi.cpp — a minimal C ABI over the attnkit C++ API for benchmark scripts (ctypes), until
// the PyTorch ops exist. Contiguous tensors only; returns 0 on success, else writes the message.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "attnkit/attnkit.hpp"

namespace {
using namespace attnkit;

int fail(const Status& st, char* err, int errlen) {
  if (err && errlen > 0) std::snprintf(err, static_cast<size_t>(errlen), "%s", st.message().c_str());
  return 1;
}

}  // namespace

extern "C" {

// layout 0: q/k/v/out contiguous [B, S, H, D] (or [total, H, D] with cu_seqlens);
// layout 1: contiguous [B, H, S, D] (torch SDPA's layout), seen through strides.
int attnkit_c_attention_fwd(void* q, void* k, void* v, void* out, void* lse, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq,
                            int64_t Hkv, int64_t D, int dtype, int layout, int causal, int top_left, int64_t window_left,
                            int64_t window_right, double softcap, double scale, const int32_t* cu_q, const int32_t* cu_k,
                            int64_t num_seqs, int64_t max_q, int64_t max_k, void* stream, char* err, int errlen) {
  const DType dt = dtype == 0 ? DType::kBFloat16 : DType::kFloat16;
  const Device dev = Device::cuda(0);
  AttentionFwdParams p;
  if (cu_q) {
    p.q = TensorView::contiguous(q, dt, dev, {Sq, Hq, D});
    p.k = TensorView::contiguous(k, dt, dev, {Sk, Hkv, D});
    p.v = TensorView::contiguous(v, dt, dev, {Sk, Hkv, D});
    p.out = TensorView::contiguous(out, dt, dev, {Sq, Hq, D});
    if (lse) p.lse = TensorView::contiguous(lse, DType::kFloat32, dev, {Hq, Sq});
    p.cu_seqlens_q = TensorView::contiguous(const_cast<int32_t*>(cu_q), DType::kInt32, dev, {num_seqs + 1});
    p.cu_seqlens_k = TensorView::contiguous(const_cast<int32_t*>(cu_k), DType::kInt32, dev, {num_seqs + 1});
    p.max_seqlen_q = max_q;
    p.max_seqlen_k = max_k;
  } else if (layout == 0) {
    p.q = TensorView::contiguous(q, dt, dev, {B, Sq, Hq, D});
    p.k = TensorView::contiguous(k, dt, dev, {B, Sk, Hkv, D});
    p.v = TensorView::contiguous(v, dt, dev, {B, Sk, Hkv, D});
    p.out = TensorView::contiguous(out, dt, dev, {B, Sq, Hq, D});
    if (lse) p.lse = TensorView::contiguous(lse, DType::kFloat32, dev, {B, Hq, Sq});
  } else {
    p.q = TensorView::contiguous(q, dt, dev, {B, Hq, Sq, D}).transposed(1, 2);
    p.k = TensorView::contiguous(k, dt, dev, {B, Hkv, Sk, D}).transposed(1, 2);
    p.v = TensorView::contiguous(v, dt, dev, {B, Hkv, Sk, D}).transposed(1, 2);
    p.out = TensorView::contiguous(out, dt, dev, {B, Hq, Sq, D}).transposed(1, 2);
    if (lse) p.lse = TensorView::contiguous(lse, DType::kFloat32, dev, {B, Hq, Sq});
  }
  p.mask.causal = causal != 0;
  p.mask.align = top_left ? CausalAlign::kTopLeft : CausalAlign::kBottomRight;
  p.mask.window_left = window_left;
  p.mask.window_right = window_right;
  p.softcap = softcap;
  if (scale > 0) p.scale = scale;
  p.stream = stream;
  // One workspace for the process (single device, calls serialised by the caller's stream).
  static void* workspace = nullptr;
  p.workspace.bytes = attention_forward_workspace_size(p);
  if (!workspace && cudaMalloc(&workspace, 256) != cudaSuccess) return fail(Status(StatusCode::kBackendError, "cudaMalloc failed"), err, errlen);
  p.workspace.data = workspace;
  const Status st = attention_forward(p);
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

}  // extern "C"
