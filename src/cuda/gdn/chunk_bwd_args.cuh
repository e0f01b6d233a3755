// src/cuda/gdn/chunk_bwd_args.cuh — the arguments of the chunked backward's own kernels (the
// per-chunk dv_local and gradient kernels, the finishing passes); the forward's kernels, rerun in
// the backward, and bwd_dhu keep their own arguments.
#pragma once
#include <cstdint>

#include "src/cuda/gdn/chunk_fwd_args.cuh"

namespace attnkit::cuda::gdn {

struct ChunkBwdArgs {
  // Inputs: q, k [B, T, H, K] (normalised: the workspace's qn, kn when the op's l2norm is on, but
  // for dv_local with `normalize` and with `fold_norms`), v, dout [B, T, HV, V]; beta [B, T, HV] as
  // given (beta_logit: a logit).
  RowTensor q, k, v, dout;
  // The op's l2norm with the forward's inverse norms kept (rstd_q, rstd_k below): q, k are the raw
  // rows, and each kernel normalises its landed Q and K tiles in shared memory with them (each
  // element times its row's factor, rounded once: qn / kn's bits) — no normalised copies written
  // or read (docs/perf/gdn_chunk_bwd.md).
  bool fold_norms = false;
  // dv_local with the op's l2norm: q, k are the op's raw rows; it normalises them in shared memory
  // and writes qn, kn (16-bit [rows, H, K]) and rstd_q, rstd_k (below) for every later kernel.
  bool normalize = false;
  RowTensor qn, kn;
  TokenTensor beta;
  bool beta_logit = false;
  // The forward's pieces, one row per token ([rows, HV, ...], as ChunkFwdArgs' workspace): gamma
  // (fp32, log2 units), T = (I + L)^-1 [.., 64], v_new (16-bit); per chunk slot [slots, HV, K, V]
  // (16-bit): the start state H and dh, the gradient of the end state (bwd_dhu).
  RowTensor gamma, tmat, vnew;
  const void* states = nullptr;
  const void* dh = nullptr;
  RowTensor dv_local, dv2;  // [rows, HV, V] 16-bit: bwd_dhu's input and output
  // Outputs: dv (the op's, [B, T, HV, V] 16-bit); fp32 in the workspace per value head: dbeta and
  // dg [rows, HV] (dg: the in-chunk reverse cumsum of dgamma done) and, with GVA, dq, dk
  // [rows, HV, K] for the finish pass's sums.
  RowTensor dv, dq, dk, dbeta, dg;
  // Without GVA (H == HV) dq, dk are final here: `direct` writes them in 16 bits to dq_out, dk_out
  // (the op's), through the in-op l2norm's backward when rstd_q / rstd_k (fp32, by row and head, the
  // inverse norms of the raw rows) are given: dx = rstd (dy - y (y . dy)), y the normalised row.
  // (With fold_norms they are given in any case: the tiles' factors.)
  bool direct = false;
  RowTensor dq_out, dk_out, rstd_q, rstd_k;
  const int64_t* cu_seqlens = nullptr;
  // Varlen (rows < 2^31): each chunk slot's {sequence n, chunk j (-1 past the sequence's last),
  // the sequence's first row, its length}, written once by gdn_slot_tables_kernel: the per-chunk
  // kernels' item decode in one load, without the bisection over cu_seqlens (its chain of dependent
  // loads at every item was ~7% of the gradient kernel's stall samples at issue 6's varlen case)
  // and without WorkItem's cu_seqlens loads (docs/perf/gdn_chunk_bwd.md).
  const int4* slot_items = nullptr;
  int64_t tokens = 0;
  int num_seqs = 0, H = 0, HV = 0, v_blocks = 1;  // v_blocks: WorkItem's; one block per CTA here
  float scale = 1.f;
  bool vec16 = false;  // q, k, v, dout rows 16-byte aligned (cp.async), else element copies
};

// A [B, T, heads] output of any float dtype: strides of (b, t, head) (varlen: batch stride 0).
struct TokenOut {
  void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  int64_t sb = 0, st = 0, sh = 0;
};

// The finishing passes over tokens (after the per-chunk kernel): GVA sums and the in-op
// l2norm's backward for dq, dk; sigmoid and fused-gate backward for dbeta, dg; dA_log, ddt_bias.
struct BwdFinishArgs {
  RowTensor dq_out, dk_out;       // the op's dq, dk (16-bit)
  RowTensor qn, kn;               // with the l2norm: the normalised q, k (16-bit [rows, H, K]) and
  RowTensor rstd_q, rstd_k;       // their inverse norms (fp32, by row and head), dv_local's (workspace);
  bool raw_rows = false;          // or qn, kn the raw rows, normalised here (fold_norms' bits)
  RowTensor dq, dk;               // fp32 [rows, HV, K] per value head (workspace); absent: done
  RowTensor dbeta, dg;            // fp32 [rows, HV] (workspace)
  TokenTensor beta, g;            // the op's raw beta, g
  TokenOut dbeta_out;             // [B, T, HV] in beta's dtype
  TokenOut dg_out;                // [B, T, HV] in g's dtype (absent: no gate)
  const float* A_log = nullptr;   // fused gate
  const float* dt_bias = nullptr;
  int64_t a_stride = 1, dt_stride = 1;
  float* dA_log = nullptr;        // [HV] fp32 (with the fused gate)
  float* ddt_bias = nullptr;
  int64_t da_stride = 1, ddt_stride = 1;
  int64_t B = 1, T = 0;           // rows = B * T (varlen: B = 1)
  int H = 0, HV = 0, K = 0;
  bool l2norm = false, beta_logit = false;
};

// The op's l2norm as a pass of its own (l2norm_rows.cuh).
struct L2NormRowsArgs {
  RowTensor q, k;            // the op's raw rows ([B, T, H, D] strides; varlen B = 1)
  bool vec16 = true;         // q's and k's rows start 16-byte aligned (else read element by element)
  RowTensor qn, kn;          // out: 16-bit [rows, H, D] (the backward's workspace, the forward's kept buffer)
  RowTensor rstd_q, rstd_k;  // out: fp32 [rows, H]
  int64_t B = 1, T = 0;      // rows = B * T
  int H = 0;
};

}  // namespace attnkit::cuda::gdn
