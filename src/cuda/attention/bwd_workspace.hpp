// src/cuda/attention/bwd_workspace.hpp — where each fp32 buffer of the backward (bwd_args.hpp)
// lives in the caller's workspace, for the softmax attention and flex backward dispatches. Host
// code, no CUDA.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/cuda/attention/bwd_args.hpp"

namespace attnkit::cuda {

struct BwdShape {
  int64_t batch = 0;  // sequences (varlen: cu_seqlens_q.size(0) - 1)
  int64_t sq = 0, sk = 0;  // dense lengths, or the packed totals when varlen
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
  bool varlen = false;
  bool ordered_dq = false;  // dQ added in key-tile order (AttnBwdArgs::ordered_dq)
  int dq_chains = 1;         // copies of dq_accum and of the semaphores (AttnBwdArgs::dq_chains)
  bool split_dkv = false;   // GQA: per-query-head dK / dV buffers (else one per kv head)
  int heads_per_cta_log2 = 0;  // GQA packed in the CTA (AttnBwdArgs::heads_per_cta_log2): no dK / dV buffers
};

// Byte offsets of the buffers, each 256-byte aligned; `total` is the workspace size. take() adds
// a buffer of the caller's own after them.
struct BwdWorkspace {
  int rows_padded = 0, chains = 1;
  int64_t rows_all_heads = 0;  // heads_q * rows_padded: the kernels index these rows in 32 bits
  size_t lse2 = 0, delta = 0, dq_accum = 0, dk_accum = 0, dv_accum = 0, semaphore = 0, heads_done = 0, tiles_done = 0, total = 0;

  explicit BwdWorkspace(const BwdShape& s) {
    const int64_t m = kBwdBlockM;
    chains = s.dq_chains;
    const int64_t rows = s.varlen ? (s.sq + s.batch * m + m - 1) / m * m : s.batch * ((s.sq + m - 1) / m) * m;
    rows_all_heads = s.heads_q * rows;
    if (!fits_32_bits()) return;  // the dispatchers refuse the shape
    rows_padded = static_cast<int>(rows);
    const int64_t rows_k = s.varlen ? s.sk : s.batch * s.sk;
    lse2 = take(s.heads_q * rows_padded * 4);
    delta = take(s.heads_q * rows_padded * 4);
    dq_accum = take(s.dq_chains * s.heads_q * rows_padded * s.head_dim * 4);
    semaphore = take((s.dq_chains + 1) * s.heads_q * rows_padded / m * 4);  // per chain, then the claims
    heads_done = take(s.batch * s.heads_q * 4);
    tiles_done = take(s.batch * s.heads_q * 4);
    if ((s.heads_q >> s.heads_per_cta_log2) != s.heads_kv) {
      const int64_t heads = s.split_dkv ? s.heads_q : s.heads_kv;
      dk_accum = take(rows_k * heads * s.head_dim * 4);
      dv_accum = take(rows_k * heads * s.head_dim * 4);
    }
  }
  bool fits_32_bits() const { return rows_all_heads <= INT32_MAX; }
  size_t take(int64_t bytes) {
    const size_t at = total;
    total += (static_cast<size_t>(bytes) + 255) / 256 * 256;
    return at;
  }
  // The buffers' pointers into a (256-byte aligned) workspace at `base`.
  void carve(char* base, AttnBwdArgs& a) const {
    a.rows_padded = rows_padded;
    a.dq_chains = chains;
    a.lse2 = reinterpret_cast<float*>(base + lse2);
    a.delta = reinterpret_cast<float*>(base + delta);
    a.dq_accum = reinterpret_cast<float*>(base + dq_accum);
    a.dq_semaphore = reinterpret_cast<int*>(base + semaphore);
    a.dq_heads_done = reinterpret_cast<int*>(base + heads_done);
    a.preprocessed_tiles = reinterpret_cast<int*>(base + tiles_done);
    if (!a.dkv_in_cta()) {
      a.dk_accum = reinterpret_cast<float*>(base + dk_accum);
      a.dv_accum = reinterpret_cast<float*>(base + dv_accum);
    }
  }
};

// Why a shape whose rows overflow the kernels' 32-bit row index is refused.
inline std::string too_many_rows_message(const BwdWorkspace& ws, const char* who) {
  return "q: " + std::string(who) + " indexes query heads x padded query rows (tiles of " + std::to_string(kBwdBlockM) +
         ") in 32 bits; this call has " + std::to_string(ws.rows_all_heads);
}

}  // namespace attnkit::cuda
