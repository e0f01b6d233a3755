// src/cuda/attention/bwd_args.hpp — what the host hands the backward kernels: raw pointers, strides
// (in elements), sizes, options and the workspace carve-up. Plain data, no CUDA or CuTe types.
//
// Per-query fp32 buffers (lse2, delta, dq_accum) use "padded rows": sequence b starts at
// row_base(b), a multiple of kBlockM, and owns ceil(len / kBlockM) * kBlockM rows, so every query
// tile is whole and contiguous. Rows past a sequence's end hold lse2 = +inf and delta = 0, which
// makes their probabilities, and so every gradient they would feed, exactly 0.
#pragma once
#include <cstdint>

#include "attnkit/semantics/mask.hpp"

namespace attnkit::cuda {

inline constexpr int kBwdBlockM = 64;  // query rows per tile of the backward (BwdTraits::kBlockM)
// Keys per CTA of the backward (BwdTraits::kBlockN): 64 where D is split between the consumer
// warpgroups (D 256), else 128.
ATTNKIT_HD constexpr int bwd_block_n(int head_dim) { return head_dim > 128 ? 64 : 128; }

struct AttnBwdArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* out = nullptr;
  const void* dout = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  // Strides of (batch, seq, head); varlen tensors have batch stride 0.
  int64_t q_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {}, o_stride[3] = {}, do_stride[3] = {};
  int64_t dq_stride[3] = {}, dk_stride[3] = {}, dv_stride[3] = {};
  int64_t lse_stride[3] = {};  // (batch, head, seq); varlen: (0, head, token)
  int batch = 0;
  int seqlen_q = 0, seqlen_k = 0;  // dense lengths, or the packed totals when varlen
  int max_seqlen_q = 0, max_seqlen_k = 0;
  int heads_q = 0, heads_kv = 0;
  int head_dim = 0;
  const int32_t* cu_seqlens_q = nullptr;  // device pointers, both set for varlen
  const int32_t* cu_seqlens_k = nullptr;
  float scale = 1.f;
  float softcap = 0.f;
  MaskOptions mask;
  bool split_dkv = false;      // GQA: per-query-head dK/dV buffers summed in order (else fp32 atomics)
  bool ordered_dq = false;  // dQ partials added in key-tile order (deterministic; bwd_dq_writer.cuh)
  // Ordered dQ in `dq_chains` independent chains: key tile n adds into copy n % dq_chains of
  // dq_accum, after the earlier key tiles of its own chain only; the dq postprocess sums the
  // copies in chain order. Key tile n then waits for n / dq_chains predecessors, not n, when the
  // CTAs of a head start together (docs/perf/attention_bwd.md, "Two dQ chains").
  int dq_chains = 1;
  // Default mode only: the preprocess zeroes dq_accum and every key tile adds, instead of the first
  // writer of a query tile storing (a claim per tile, the others waiting for it to land). Chosen
  // where many key tiles meet each query tile: there the claims' waits cost more than the zeroing
  // (docs/perf/attention_bwd.md, "dQ without the zeroing").
  bool dq_zeroed = false;
  // Into a zeroed dq_accum without order the consumers add their dQ partials themselves, straight
  // from registers (red.v4: no staging buffer, no fence, no hand-off to the writer warp).
  ATTNKIT_HD bool dq_direct() const { return dq_zeroed && !ordered_dq; }
  // The kernel just before the preprocess in the stream (flex's list builder, bwd_lists.cuh) lets
  // it start early (programmatic_launch.cuh): the preprocess reads nothing that kernel writes, and
  // waits for it before ending, so the main kernel after it sees both.
  bool preprocess_after_trigger = false;
  // Launch order of the main kernel's CTAs (launch_order.hpp): a sequence's heads taken
  // 2^heads_per_group_log2 at a time, key tile by key tile across the group; 0 is the plain
  // (key tile, head, sequence) order. Set by launch_bwd.
  int heads_per_group_log2 = 0;
  int num_sms = 132;  // the device's SM count (that rule's input)

  // Workspace (fp32 unless noted), carved by the dispatcher.
  int rows_padded = 0;          // padded query rows per head (see above)
  float* lse2 = nullptr;        // [heads_q, rows_padded]: lse * log2(e), +inf where no key / padding
  float* delta = nullptr;       // [heads_q, rows_padded]: rowsum(dO * O)
  float* dq_accum = nullptr;    // [dq_chains, heads_q, rows_padded / kBlockM] tiles of kBlockM * D, MMA order
  float* dk_accum = nullptr;    // GQA only: [rows_k, heads_kv or heads_q, D] (atomic or split)
  float* dv_accum = nullptr;
  // [dq_chains + 1, heads_q, rows_padded / kBlockM] int, zeroed by the preprocess: per chain and query
  // tile the adds landed (ordered; the default mode counts only the first, the store), then per
  // query tile the default mode's claims (who stores first: bwd_dq_writer.cuh).
  int* dq_semaphore = nullptr;
  // The first padded row of chain c's copy: copies of dq_accum (and of the semaphores, a row per
  // kBwdBlockM) lie heads_q * rows_padded rows apart.
  ATTNKIT_HD int64_t chain_row0(int chain) const { return int64_t(chain) * heads_q * rows_padded; }
  void* stream = nullptr;
  // [batch, heads_q] int, zeroed by the preprocess: the main kernel's CTAs (key tiles) of each
  // (sequence, query head) whose dQ is in dq_accum. With dq_after_heads the dq postprocess starts
  // while the main kernel's last CTAs run and converts each head once all its key tiles counted.
  int* dq_heads_done = nullptr;
  bool dq_after_heads = false;
  // > 0: the preprocess runs on that many SMs beside the main kernel instead of before it, and
  // counts per (sequence, query head) the query tiles it has done ([batch, heads_q] int, zeroed by
  // launch_bwd before it); each main-kernel CTA waits for its head's count (bwd_prepost.cuh). -1:
  // launch_bwd applies preprocess_sms_rule.
  int preprocess_sms = -1;
  int* preprocessed_tiles = nullptr;
  // GQA in the CTA (GqaReduction::kPacked; its own kernel, bwd_variant.cuh): each CTA takes its key
  // tile for all 2^heads_per_cta_log2 query heads of a kv head's group (the grid's y counts kv
  // heads), visiting (query tile, head) pairs, and sums dK / dV over them in registers: written as
  // without GQA, no fp32 buffers, no atomics, the same bits every run. 0: a CTA per query head.
  // (Last: a field in the middle moved the others' offsets, and the kernel's code with them.)
  int heads_per_cta_log2 = 0;
  ATTNKIT_HD bool dkv_in_cta() const { return (heads_q >> heads_per_cta_log2) == heads_kv; }
  // The device's memory system is fast (current_device_fast_dram): the launch rules' input.
  bool fast_dram = false;
};

// Head dims whose consumers add dQ into a zeroed dq_accum themselves (AttnBwdArgs::dq_direct;
// BwdTraits::kDqDirect): not the split-D kernel, whose 64 KB partial as 16 vector adds a thread ran
// 1.3x slower than the writer warp's bulk add (docs/perf/attention_bwd.md, "dQ added by the consumers").
ATTNKIT_HD constexpr bool dq_direct_adds(int head_dim) { return head_dim <= 128; }

// AttnBwdArgs::dq_zeroed's rule: the default mode with more than 2048 keys, or 2048 without a mask;
// on a fast memory system (fast_dram: an H200) with the consumers' direct adds, also 2048 keys with
// a mask and any length without one.
// Measured on an H100 (bench/results/2026-11-23-h100-attention-bwd-dq-first-store-ab-probe.txt): the
// first-writer store took S512 4-9% and S2k 0-3% faster, S16k 1-4% slower (every key tile of a head
// meets each query tile at about the same moment there, so most of them wait for the first store
// to land). Since the consumers add into the zeroed dq_accum themselves (dq_direct, D <= 128), the
// zeroing also wins at 2048 keys without a mask (D64 -1.5..-6.9%, D128 -1..-2.6%; with a causal
// mask +0.4..1.1%): docs/perf/attention_bwd.md, "dQ added by the consumers". On an H200 the
// zeroing pass is cheaper and the balance moves: S2k causal D64 -3.5%, D128 -1%, S512 D64 -7%
// without a mask, S512 causal +0..2% (docs/perf/attention_bwd.md, "The launch rules on the H200").
inline bool dq_zeroed_rule(bool ordered_dq, int max_seqlen_k, bool masked, int head_dim, bool fast_dram) {
  if (ordered_dq) return false;
  if (max_seqlen_k > 2048) return true;
  if (!dq_direct_adds(head_dim)) return false;
  if (fast_dram) return !masked || max_seqlen_k == 2048;
  return max_seqlen_k == 2048 && !masked;
}

// AttnBwdArgs::preprocess_sms's rule: an eighth of the SMs stream O and dO (and zero dq_accum)
// while the others start the main kernel — where dq_accum is zeroed (the preprocess's traffic
// doubled) and the key tiles' work is all alike (no causal mask, window or BlockMask). Measured on
// an H100 (docs/perf/attention_bwd.md, "The preprocess beside the main kernel"): D128 S2k -2.7%;
// with a causal mask or a BlockMask the SMs taken from the main kernel's first, longest tiles cost
// as much as the overlap saves (flex causal / ALiBi +1-2%). On a fast memory system (an H200) the
// masked rows of at most 2048 keys, zeroed there since dq_zeroed_rule's H200 case, take a quarter
// of the SMs: D128 S2k causal 0.818 ms against 0.831 with the preprocess first, D64 1.119 against
// 1.125 (docs/perf/attention_bwd.md, "The launch rules on the H200"). Not at 512 keys or fewer: the
// preprocess's bytes grow with the rows and the main kernel's work with their square, so short
// sequences outrun the preprocess on its few SMs, each CTA waiting for its head's count — varlen
// 64 x 256 tokens without a mask ran 0.473 ms beside against 0.365 with the preprocess first, 32 x
// 512 0.496 against 0.488 (H200, docs/perf/attention_bwd.md, "Short sequences: the preprocess first").
inline int preprocess_sms_rule(int num_sms, bool dq_zeroed, bool work_differs, int max_seqlen_k, bool fast_dram) {
  if (!dq_zeroed || max_seqlen_k <= 512) return 0;
  if (!work_differs) return num_sms / 8;
  return fast_dram && max_seqlen_k <= 2048 ? num_sms / 4 : 0;
}

// log2 of the group size (Hq / Hkv) where it is a power of two, else -1: the packed layout's
// precondition (AttnBwdArgs::heads_per_cta_log2).
inline int group_log2(int heads_q, int heads_kv) {
  if (heads_kv <= 0 || heads_q % heads_kv != 0) return -1;
  const int group = heads_q / heads_kv;
  if ((group & (group - 1)) != 0) return -1;
  int lg = 0;
  while ((1 << lg) < group) ++lg;
  return lg;
}

// GqaReduction::kAuto's choice of the packed layout: where the packed grid, key tiles x sequences
// x kv heads, still fills the GPU four times over (a CTA per (key tile, kv head) runs `group` times
// longer), and the tiles' work is alike or a head has at most 16 key tiles. Measured on an H100
// (docs/perf/attention_bwd.md, "GQA's heads packed in the CTA"), D128 Hq32 Hkv8 against the
// atomic reduction: S2k -8%, S2k causal -12%, S8k -2.6%, D64 S8k causal -5%; but S4k causal +-1%,
// S8k causal +2%, S16k causal +-1% (the packed CTAs' longer tiles, not the atomics, set the time
// there), and Hkv 2 (group 16, 256 CTAs) +29%.
inline bool packed_heads_rule(int heads_q, int heads_kv, int64_t key_tiles, int64_t sequences, bool work_differs, int num_sms) {
  if (group_log2(heads_q, heads_kv) <= 0) return false;
  if (key_tiles * sequences * heads_kv < 4 * int64_t(num_sms)) return false;
  return !work_differs || key_tiles <= 16;
}

// First padded row of sequence b (kBlockM-aligned; regions of consecutive sequences never overlap).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int bwd_row_base(const AttnBwdArgs& a, int b, int cu_q_b) {
  if (!a.cu_seqlens_q) return b * ((a.seqlen_q + kBwdBlockM - 1) / kBwdBlockM) * kBwdBlockM;
  return (cu_q_b + b * kBwdBlockM) / kBwdBlockM * kBwdBlockM;
}

}  // namespace attnkit::cuda
