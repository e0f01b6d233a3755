// attnkit/gdn.hpp — gated delta rule linear attention (Gated DeltaNet), spec/gdn.md.
//
// q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; gk [B, T, HV, K] (per-key gate variant);
// out [B, T, HV, V] in q's dtype. GVA: HV % H == 0, value head hv reads q/k head hv / (HV / H).
// Varlen: B == 1 and cu_seqlens int64 [N+1]. States [N, HV, K, V] ("K-first") or [N, HV, V, K].
#pragma once
#include <cstdint>
#include <optional>
#include "attnkit/status.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {

enum class StateLayout : uint8_t { kKV, kVK };

// kChunked is the algorithm of spec/gdn.md; kRecurrent is the token recurrence (the ground truth,
// CPU only), kept selectable so tests and users can compare the two.
enum class GdnAlgorithm : uint8_t { kChunked, kRecurrent };

// Everything the forward reads; the backward reads the same.
struct GdnInputs {
  TensorView q, k, v, beta;
  TensorView g;        // [B, T, HV] log-decay (<= 0), or the raw gate when A_log/dt_bias are given
  TensorView gk;       // [B, T, HV, K] per-key log-decay (exclusive with g); may be absent
  TensorView A_log;    // [HV]: fused gate g = -exp(A_log[hv]) * softplus(g + dt_bias[hv])
  TensorView dt_bias;  // [HV]
  TensorView initial_state;  // optional, any float dtype
  TensorView cu_seqlens;     // optional int64 [N+1]
  std::optional<double> scale;  // default K^-0.5
  StateLayout state_layout = StateLayout::kKV;
  bool use_qk_l2norm = false;  // q, k <- x / sqrt(sum x^2 + 1e-6) inside the op
  bool beta_is_logit = false;  // beta <- sigmoid(beta) inside the op
  GdnAlgorithm algorithm = GdnAlgorithm::kChunked;
};

// What a training forward keeps for the backward (GdnFwdParams / GdnBwdParams::intermediates).
enum class GdnKeep : uint8_t {
  // w, T, v_new, gamma and each chunk's start state (at K = V = 128 about 4.5x v's bytes): the
  // backward reruns none of the forward's kernels.
  kAll,
  // T alone, the chunks' (I + L)^-1 (16-bit, 64 values a token and value head: half v's bytes at
  // V = 128; what FLA's forward keeps as A): the backward reruns the state pass, but forms w and
  // u from T by two GEMMs a chunk instead of inverting again. Its w and u then come from T's
  // 16-bit rounding (as FLA's do), so the gradients differ from kAll's in the last bits.
  // With the in-op l2norm (use_qk_l2norm) also the inverse norms of q's and k's rows (fp32 a token
  // and qk head), with which the backward normalises the raw rows on chip instead of working the
  // norms out again (FLA's forward keeps q and k normalised instead: 16-bit, 4x T's bytes).
  kT,
};

struct GdnFwdParams {
  GdnInputs in;
  TensorView out;
  TensorView final_state;  // optional fp32 output
  Workspace workspace;     // CUDA: gdn_forward_workspace_size() bytes, 256-byte aligned (w, u, gamma)
  // Optional (training): where the forward keeps what the backward would otherwise recompute —
  // gdn_intermediates_size(in, keep) bytes, 256-byte aligned. Hand the same buffer, untouched, to
  // gdn_backward of the same inputs (GdnBwdParams::intermediates). Absent: inference, or a
  // backward that reruns the forward's kernels (less memory, more time). keep: what it holds.
  Workspace intermediates;
  GdnKeep keep = GdnKeep::kAll;
  // The CUDA forward's sequence split: with too few (sequence, head) pairs to fill the GPU it
  // cuts each sequence into segments that run side by side and are stitched exactly (spec/gdn.md,
  // the affine composition). 0: chosen from the shape and the GPU's SM count; 1: never; n > 1:
  // n segments (at most one a chunk of 64 tokens). Dense batches only: with cu_seqlens it is 1.
  // A training forward (intermediates) keeps each segment's chunks as the unsplit run would; the
  // backward's rerun splits alike (GdnBwdParams::num_segments). The CPU backend ignores it.
  int num_segments = 0;
  Stream stream = nullptr;
};

struct GdnBwdParams {
  GdnInputs in;
  TensorView dout;
  TensorView dfinal_state;  // optional: gradient w.r.t. the final state
  // Outputs (gradients w.r.t. the op's raw inputs, in their dtypes). dg is w.r.t. whichever of
  // g / gk was given; dinitial_state is fp32 and only written when initial_state is given;
  // dA_log / ddt_bias only with the fused gate.
  TensorView dq, dk, dv, dbeta, dg, dinitial_state, dA_log, ddt_bias;
  Workspace workspace;      // gdn_backward_workspace_size() bytes (smaller with intermediates)
  Workspace intermediates;  // optional: the forward's (GdnFwdParams::intermediates), read only
  GdnKeep keep = GdnKeep::kAll;  // what it holds: the forward's GdnFwdParams::keep
  // Without intermediates the CUDA backward reruns the forward's kernels, with the forward's
  // sequence split (GdnFwdParams::num_segments: 0 automatic, 1 never, n segments). With the
  // same value as a training forward's, kept and rerun intermediates are the same bits. The
  // reverse state-gradient pass splits its own chain likewise (GdnBwdDhuParams::num_segments).
  int num_segments = 0;
  Stream stream = nullptr;
};

// Recurrent decode (fused_recurrent_gated_delta_rule): a few tokens per sequence, the fp32 state
// read and written once, in place. With state_indices, sequence n uses state[state_indices[n]]
// of a pool (a negative index marks a padding slot: that sequence is skipped, its output is 0).
struct GdnDecodeParams {
  TensorView q, k, v, beta, g, gk, A_log, dt_bias;  // as GdnInputs, T = tokens per sequence
  TensorView cu_seqlens;     // optional int64 [N+1] with B == 1
  TensorView state;          // fp32 [P, HV, K, V] or [P, HV, V, K], updated in place
  TensorView state_indices;  // optional int32/int64 [N]; without it P == N and sequence n uses state[n]
  TensorView out;
  std::optional<double> scale;
  StateLayout state_layout = StateLayout::kKV;
  bool use_qk_l2norm = false;
  bool beta_is_logit = false;
  Stream stream = nullptr;
};

// The reverse state-gradient pass of the chunked backward on its own ("bwd_dhu", as in FLA and
// cuLA), chunk size 64. With dH starting at dht (or 0), for each chunk from the last:
//   dh[chunk] = dH                                   (gradient of the chunk's END state)
//   dv2 = dv + (K * exp(G_last - G)) dH
//   dH  = diag(exp(G_last)) dH + scale (Q * exp(G))^T do - w^T dv2
// and dh0 = dH after the first chunk. G is the in-chunk CUMULATIVE log-decay, as FLA's
// chunk_local_cumsum produces it: per token (g), or none (G = 0). With the per-key gate gk (per
// token and key, as in Kimi Delta Attention) FLA's convention holds: q and k come already gated
// (q * exp(gk), k * exp(gk_last - gk), as FLA's KDA passes them), so the two lines read
//   dv2 = dv + K dH ;  dH = diag(exp(gk_last)) dH + scale Q^T do - w^T dv2.
struct GdnBwdDhuParams {
  TensorView q, k;   // [B, T, H, K]
  TensorView w;      // [B, T, HV, K]
  TensorView dout;   // [B, T, HV, V]  ("do")
  TensorView dv;     // [B, T, HV, V]  gradient of v_new from inside the chunks
  TensorView g;      // optional [B, T, HV]
  TensorView gk;     // optional [B, T, HV, K] (exclusive with g)
  // g / gk in base-2 units (log2 of the decay) instead of natural log: FLA's convention
  // (chunk_local_cumsum with scale 1 / ln 2), taken as they are instead of converted by the caller.
  bool gates_log2 = false;
  TensorView dht;    // optional [N, HV, K, V] (or [N, HV, V, K])
  TensorView cu_seqlens;  // optional int64 [N+1], B == 1
  std::optional<double> scale;  // default K^-0.5
  StateLayout state_layout = StateLayout::kKV;
  // Outputs. dh: [B, NT, HV, K, V] (or [.., V, K]); NT = ceil(T / 64), or for varlen (B = 1) the
  // total number of chunks, sequence by sequence. dh0 (optional): fp32 [N, HV, K, V]. dv2: as dv.
  TensorView dh, dh0, dv2;
  Workspace workspace;  // CUDA: gdn_bwd_dhu_workspace_size() bytes (0: none needed), 256-byte aligned
  // The CUDA pass's sequence split of its reverse chain, for too few (sequence, value head) pairs
  // to fill the GPU (the forward's scheme, GdnFwdParams::num_segments, numbered from the end):
  // 0 chosen from the shape and the GPU's SM count, 1 never, n > 1 n segments. Dense batches with
  // 16-byte aligned rows only (else 1). The CPU backend ignores it.
  int num_segments = 0;
  Stream stream = nullptr;
};

// What a training forward keeps for the backward (GdnFwdParams::intermediates), in bytes: on CUDA,
// with kAll per token and value head, w (K), T (64) and v_new (V) in 16 bits, gamma in fp32, and
// each chunk's start state (K * V / 64 16-bit values a token) — at K = V = 128 about 4.5x the bytes
// of v; with kT the 64 16-bit values of T alone. 0 where nothing is kept (the CPU backend, or
// inputs the CUDA path refuses): pass none then.
size_t gdn_intermediates_size(const GdnInputs& in, GdnKeep keep = GdnKeep::kAll);
size_t gdn_forward_workspace_size(const GdnFwdParams& p);
size_t gdn_backward_workspace_size(const GdnBwdParams& p);
size_t gdn_bwd_dhu_workspace_size(const GdnBwdDhuParams& p);
Status gdn_forward(const GdnFwdParams& p);
Status gdn_backward(const GdnBwdParams& p);
Status gdn_decode(const GdnDecodeParams& p);
Status gdn_bwd_dhu(const GdnBwdDhuParams& p);

}  // namespace attnkit
