// src/cpu/gdn_io.hpp — finding one (sequence, head) of every GDN tensor, and the in-op
// preprocessing (l2norm, beta sigmoid, fused gate) with its backward.
#pragma once
#include <cmath>
#include <vector>

#include "attnkit/cpu/io.hpp"
#include "attnkit/gdn.hpp"
#include "attnkit/semantics/heads.hpp"
#include "attnkit/semantics/numerics.hpp"
#include "src/cpu/gdn_head.hpp"

namespace attnkit::cpu {

// Views of the GDN tensors as (sequence, time, head, feature). Varlen tensors [1, T, H, F] are seen
// as [T, H, F] with sequence n at rows cu[n] .. cu[n+1]-1; [B, T, H] tensors get a unit feature dim.
struct GdnLayout {
  TensorView cu;  // int64 [N+1] or absent
  int64_t num_seqs = 0, T = 0, H = 0, HV = 0, K = 0, V = 0;

  GdnLayout(const TensorView& q, const TensorView& v, const TensorView& cu_seqlens) : cu(cu_seqlens) {
    num_seqs = cu.defined() ? cu.size(0) - 1 : q.size(0);
    T = q.size(1);
    H = q.size(2);
    K = q.size(3);
    HV = v.size(2);
    V = v.size(3);
  }
  int64_t seq_len(int64_t n) const { return cu.defined() ? load_index(cu, n + 1) - load_index(cu, n) : T; }

  SeqTensor seq(TensorView t) const {
    if (t.ndim == 3) {  // [B, T, H] -> [B, T, H, 1]
      t.sizes[3] = 1;
      t.strides[3] = 1;
      t.ndim = 4;
    }
    if (!cu.defined()) return SeqTensor{t, nullptr, 0, 1, 2};
    TensorView u = t;  // drop the batch dim of size 1
    u.ndim = 3;
    for (int d = 0; d < 3; ++d) {
      u.sizes[d] = t.sizes[d + 1];
      u.strides[d] = t.strides[d + 1];
    }
    return SeqTensor{u, &cu, 0, 0, 1};
  }
  Slice2D slice(const TensorView& t, int64_t n, int64_t h) const { return seq(t).slice(n, h, seq_len(n)); }
};

// The K x V matrix held in the last two dims of t (K-first) or their transpose (V-first), starting
// `offset` elements into t: a state [N, HV, K, V] slice, or one chunk of bwd_dhu's dh.
inline Slice2D kv_matrix(const TensorView& t, int64_t offset, StateLayout layout) {
  Slice2D r;
  r.dtype = t.dtype;
  const bool kv = layout == StateLayout::kKV;
  r.rows = kv ? t.size(-2) : t.size(-1);
  r.cols = kv ? t.size(-1) : t.size(-2);
  r.row_stride = kv ? t.stride(-2) : t.stride(-1);
  r.col_stride = kv ? t.stride(-1) : t.stride(-2);
  r.base = static_cast<char*>(t.data) + offset * static_cast<int64_t>(dtype_size(t.dtype));
  return r;
}

// The K x V state of (n, hv) inside a [N, HV, K, V] or [N, HV, V, K] tensor.
inline Slice2D state_slice(const TensorView& s, int64_t n, int64_t hv, StateLayout layout) {
  return kv_matrix(s, n * s.stride(0) + hv * s.stride(1), layout);
}

// x <- x / sqrt(sum x^2 + eps) per row of [rows, n]; keeps the norms for the backward.
template <class Acc>
void l2norm_rows(std::vector<Acc>& x, int64_t n, std::vector<Acc>* norms) {
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  if (norms) norms->resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    Acc ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const Acc nr = std::sqrt(ss + static_cast<Acc>(kL2NormEps));
    for (int64_t i = 0; i < n; ++i) x[r * n + i] /= nr;
    if (norms) (*norms)[r] = nr;
  }
}
// Backward of l2norm: dx = (dy - y (y . dy)) / norm, with y the normalised rows.
template <class Acc>
void l2norm_rows_backward(const std::vector<Acc>& y, const std::vector<Acc>& norms, int64_t n, std::vector<Acc>& dy) {
  for (size_t r = 0; r < norms.size(); ++r) {
    Acc yd = 0;
    for (int64_t i = 0; i < n; ++i) yd += y[r * n + i] * dy[r * n + i];
    for (int64_t i = 0; i < n; ++i) dy[r * n + i] = (dy[r * n + i] - y[r * n + i] * yd) / norms[r];
  }
}

// The options a GDN head is loaded with (shared by the chunked op and the decode op).
struct GdnHeadSource {
  TensorView q, k, v, beta, g, gk, A_log, dt_bias;
  bool use_qk_l2norm = false, beta_is_logit = false;
};

// Gathers (n, hv) and applies the in-op preprocessing. raw_g / raw_beta receive the values as
// given (needed by the backward of the fused gate and sigmoid); qn / kn the l2 norms.
template <class Acc>
GdnHead<Acc> load_gdn_head(const GdnLayout& lay, const GdnHeadSource& src, int64_t n, int64_t hv,
                           std::vector<Acc>* raw_g = nullptr, std::vector<Acc>* raw_beta = nullptr,
                           std::vector<Acc>* qn = nullptr, std::vector<Acc>* kn = nullptr) {
  GdnHead<Acc> x;
  x.T = lay.seq_len(n);
  x.K = lay.K;
  x.V = lay.V;
  const int64_t h = qk_head_of(hv, lay.HV, lay.H);
  x.q = gather<Acc>(lay.slice(src.q, n, h));
  x.k = gather<Acc>(lay.slice(src.k, n, h));
  x.v = gather<Acc>(lay.slice(src.v, n, hv));
  if (src.use_qk_l2norm) {
    l2norm_rows(x.q, x.K, qn);
    l2norm_rows(x.k, x.K, kn);
  }
  x.beta = gather<Acc>(lay.slice(src.beta, n, hv));
  if (raw_beta) *raw_beta = x.beta;
  if (src.beta_is_logit)
    for (Acc& b : x.beta) b = sigmoid(b);
  if (src.gk.defined()) {
    x.gdim = x.K;
    x.g = gather<Acc>(lay.slice(src.gk, n, hv));
  } else if (src.g.defined()) {
    x.g = gather<Acc>(lay.slice(src.g, n, hv));
    if (raw_g) *raw_g = x.g;
    if (src.A_log.defined()) {
      const Acc a = -std::exp(load<Acc>(src.A_log.data, src.A_log.dtype, hv * src.A_log.stride(0)));
      const Acc bias = load<Acc>(src.dt_bias.data, src.dt_bias.dtype, hv * src.dt_bias.stride(0));
      for (Acc& g : x.g) g = a * softplus(g + bias);
    }
  } else {
    x.g.assign(static_cast<size_t>(x.T), Acc(0));
  }
  x.h0.assign(static_cast<size_t>(x.K * x.V), Acc(0));
  return x;
}

}  // namespace attnkit::cpu
