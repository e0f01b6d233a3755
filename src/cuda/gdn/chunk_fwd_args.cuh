// src/cuda/gdn/chunk_fwd_args.cuh — the chunked forward kernel's arguments, and where one CTA's
// work item (sequence, value head, block of value columns) reads and writes.
#pragma once
#include <cstdint>

#include "attnkit/semantics/heads.hpp"
#include "src/cuda/gdn/token_tensor.cuh"

namespace attnkit::cuda::gdn {

// [B, T, heads, D] 16-bit rows with unit last stride: element strides of (b, t, head).
struct RowTensor {
  void* ptr = nullptr;
  int64_t sb = 0, st = 0, sh = 0;
};

// [N, HV, K, V] or [N, HV, V, K] seen as one K x V matrix per (n, hv): strides of (n, hv, k, v).
struct StateTensor {
  AnyFloat data;  // data.ptr == nullptr: absent
  int64_t sn = 0, sh = 0, sk = 0, sv = 0;
};

struct ChunkFwdArgs {
  RowTensor q, k, v, o;
  TokenTensor g, beta;                    // [B, T, HV]
  const float* A_log = nullptr;           // fused gate: g = -exp(A_log[hv]) * softplus(g + dt_bias[hv])
  const float* dt_bias = nullptr;
  int64_t a_stride = 1, dt_stride = 1;
  StateTensor h0;                          // any float dtype; absent: zero
  float* ht = nullptr;                     // fp32; absent: not written
  int64_t ht_sn = 0, ht_sh = 0, ht_sk = 0, ht_sv = 0;
  const int64_t* cu_seqlens = nullptr;     // varlen: B == 1
  int64_t tokens = 0;                      // T of a dense batch
  int num_seqs = 0, H = 0, HV = 0, v_blocks = 0;
  float scale = 1.f;
  bool l2norm = false, beta_logit = false;
  bool vec16 = false;                      // q, k, v rows start 16-byte aligned: cp.async 16 B
  bool o_pairs = false;                    // out rows start 4-byte aligned: 2 columns per store
};

// CTA `item` -> (sequence n, value head hv, value block vb), vb fastest so that the CTAs sharing
// one head's q/k rows run together and meet in L2.
struct WorkItem {
  int n, hv, h, vb;
  int64_t b, t0, len;
  int nchunks;
  __device__ WorkItem(const ChunkFwdArgs& a, int item) {
    vb = item % a.v_blocks;
    const int rest = item / a.v_blocks;
    hv = rest % a.HV;
    n = rest / a.HV;
    h = static_cast<int>(qk_head_of(hv, a.HV, a.H));
    if (a.cu_seqlens) {
      b = 0;
      t0 = a.cu_seqlens[n];
      len = a.cu_seqlens[n + 1] - t0;
    } else {
      b = n;
      t0 = 0;
      len = a.tokens;
    }
    nchunks = static_cast<int>((len + 63) / 64);
  }
  // Rows of chunk j inside the sequence (64 but for the tail chunk).
  __device__ int valid_rows(int j) const {
    const int64_t left = len - int64_t(j) * 64;
    return left < 64 ? static_cast<int>(left) : 64;
  }
  // Element offset of token t's row (t counted from the sequence start) in a [B, T, heads, D] tensor.
  __device__ int64_t row(const RowTensor& x, int64_t t, int head) const { return b * x.sb + (t0 + t) * x.st + head * x.sh; }
};

}  // namespace attnkit::cuda::gdn
