// src/cuda/gdn/chunk_fwd_args.cuh — the chunked forward kernels' arguments, and where one CTA's
// work reads and writes: a sequence (WorkItem), and for the WY kernel one chunk of it (ChunkSlot).
#pragma once
#include <cstdint>

#include <cutlass/fast_math.h>

#include "attnkit/semantics/heads.hpp"
#include "src/cuda/gdn/token_tensor.cuh"

namespace attnkit::cuda::gdn {

// What the recurrence kernel produces: the output (inference); the output and what the backward
// keeps (a training forward: each chunk's start state and v_new); only the latter (the
// backward's rerun of the forward when the forward kept nothing); or only the end state (the
// sequence split's first pass, SegmentSplit). A template parameter, so the inference kernel
// carries no code for the others.
enum class Recurrence { kOutput, kOutputAndStates, kStates, kEnd };
constexpr bool writes_output(Recurrence m) { return m == Recurrence::kOutput || m == Recurrence::kOutputAndStates; }
constexpr bool keeps_states(Recurrence m) { return m == Recurrence::kOutputAndStates || m == Recurrence::kStates; }

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

// The sequence split (dense batches; chunk_fwd_split.cuh): with too few (sequence,
// value head) chains to fill the GPU, each sequence is cut into `count` segments of `chunks`
// chunks (the last may be shorter), run side by side and stitched exactly (spec/gdn.md: a run's
// end state is affine in its start, H_end = P^T H_start + R). Three launches:
//   kEnds (Recurrence::kEnd) over segments 0 .. count - 2: segment 0 from h0, the others from 0,
//     each writing its end state (start_1, or R) into the next slot of `starts`; segments >= 1 also
//     run `extra_blocks` = DK / 64 "virtual" blocks of 64 value columns with u = 0 and the
//     identity as start, whose end state is P^T (the chunks' product, spec/gdn.md's M), to `prods`;
//   the stitch kernel: starts[s + 1] += prods[s] starts[s], s = 1 .. count - 2, in order;
//   kOutputs (Recurrence::kOutput; kOutputAndStates or kStates when the backward's start states
//     and v_new are kept) over every segment from its start (h0 for segment 0), the last writing
//     the final state.
// bwd_dhu splits its reverse chain the same way, segments numbered from the end (bwd_dhu_split.cuh).
struct SegmentSplit {
  enum Pass { kNone, kEnds, kOutputs };
  Pass pass = kNone;
  int chunks = 0, count = 1;  // chunks a segment, segments a sequence
  int extra_blocks = 0;       // kEnds: P's 64-column blocks a (segment, head)
  float* starts = nullptr;    // [N, count, HV, DK, V] fp32: slot s, segment s's start (s >= 1)
  float* prods = nullptr;     // [N, count, HV, DK, DK] fp32: slot s, segment s's P^T (1 <= s <= count - 2)
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
  // The WY kernel's results, in the caller's workspace, one row per token like q: w [rows, HV, DK],
  // u [rows, HV, V] (16-bit), gamma (fp32, in-chunk cumulative log-decay in log2 units; the host
  // lays it out [B, HV, T]: one warp's loads of a chunk's rows are 4 sectors, not 32).
  RowTensor w, u, gamma;
  int64_t wy_slots = 0;                    // grid.x of the WY kernel (ChunkSlot)
  // What the backward keeps from the forward (absent in inference): T = (I + L)^-1 [rows, HV, 64]
  // and v_new [rows, HV, V] (16-bit), each chunk's start state [slots, HV, DK, V] (16-bit, slot as
  // ChunkSlot numbers the chunks). Which of o and these the recurrence writes: the Recurrence
  // mode, chosen from which pointers are set (o absent: kStates; states set: kOutputAndStates).
  RowTensor tmat, vnew;
  void* states = nullptr;
  bool l2norm = false, beta_logit = false;
  bool vec16 = false;                      // q, k, v rows start 16-byte aligned: cp.async 16 B
  bool o_vec16 = false;                    // out rows start 16-byte aligned: 8 columns per store
  // Inference with TMA rows at DK = 2 x 64: the WY kernel writes [Tu | Tw] rows into w (u unused)
  // and the recurrence kernel forms w and u itself (chunk_fwd_wu.cuh).
  bool wu_in_recurrence = false;
  // The backward's rerun with the forward's T kept (GdnKeep::kT): the WY kernel reads T from tmat
  // and forms w and u from it by two GEMMs (WyChunk::run_from_t) instead of inverting.
  bool wy_from_t = false;
  // A training forward keeping T with the in-op l2norm (GdnKeep::kT) keeps the inverse norms of q's
  // and k's rows, rstd_q, rstd_k (fp32, [B, H, T]; l2norm_rows.cuh's bits), so that the backward
  // normalises the raw rows on chip (ChunkBwdArgs::fold_norms) rather than working the norms out
  // again or reading normalised copies. The recurrence writes them: its row factors need them
  // anyway (chunk_gate_factors).
  RowTensor rstd_q, rstd_k;
  // A training forward keeping T (GdnKeep::kT) of a varlen batch keeps the backward's slot tables
  // (slot_record below; ChunkBwdArgs::slot_items, bwd_dhu's chunk offsets), written by the WY
  // kernel's value-head-0 CTAs from their own ChunkSlot, so that the backward needs no launch of its
  // own for them (absent: not written).
  int64_t* kept_first = nullptr;  // [N] the slot of sequence n's first chunk
  int4* kept_slot_items = nullptr;  // [slots]
  SegmentSplit split;  // split.count > 1: the recurrence runs as segments (dense batches)
};

// A CTA's (sequence n, value head hv, value block vb) and the sequence's rows. A chain kernel's
// CTA `item` numbers them vb fastest (ItemDivisors::item) so that the CTAs sharing one head's q/k
// rows run together and meet in L2. Args: any kernel's arguments with num_seqs' companions
// cu_seqlens, tokens, H, HV and v_blocks (ChunkFwdArgs, BwdDhuArgs).
struct WorkItem {
  int n, hv, h, vb;
  int seg = 0;  // the sequence split's segment (SegmentSplit; t0 and len are the segment's)
  int64_t b, t0, len;
  int nchunks;
  template <class Args>
  __device__ WorkItem(const Args& a, int n_, int hv_, int vb_)
      : WorkItem(a, n_, hv_, vb_, static_cast<int>(qk_head_of(hv_, a.HV, a.H))) {}
  // With the value head's qk head h_ worked out by the caller (the gradient kernel's, without a
  // division where HV == H).
  template <class Args>
  __device__ WorkItem(const Args& a, int n_, int hv_, int vb_, int h_) : n(n_), hv(hv_), h(h_), vb(vb_) {
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
  // A varlen sequence's item from its rows as known (vb 0): no cu_seqlens loads.
  struct KnownRows {
    int64_t t0, len;
  };
  __device__ WorkItem(int n_, int hv_, int h_, KnownRows r)
      : n(n_), hv(hv_), h(h_), vb(0), b(0), t0(r.t0), len(r.len), nchunks(static_cast<int>((r.len + 63) / 64)) {}
  // Rows of chunk j inside the sequence (64 but for the tail chunk).
  __device__ int valid_rows(int j) const {
    const int64_t left = len - int64_t(j) * 64;
    return left < 64 ? static_cast<int>(left) : 64;
  }
  // Element offset of token t's row (t counted from the sequence start) in a [B, T, heads, D] tensor.
  __device__ int64_t row(const RowTensor& x, int64_t t, int head) const { return b * x.sb + (t0 + t) * x.st + head * x.sh; }
};

// A chain kernel's CTA index -> (sequence, value head, value block, qk head) by divisors worked out
// on the host (cutlass::FastDivmod: a multiply-high and a shift each). WorkItem(a, item)'s three
// runtime 32-bit divisions and qk_head_of's two 64-bit ones (~150 instructions of dependent
// steps, on every warp) were ~3% of the varlen forward recurrence's stall samples: 2,560 CTAs
// of ~7 chunks each pay them at their start (docs/perf/gdn_chunk_fwd.md).
struct ItemDivisors {
  cutlass::FastDivmod by_blocks, by_heads, by_group;  // v_blocks, HV, HV / H
  ItemDivisors() = default;
  template <class Args>  // any kernel's arguments with v_blocks, HV and H (all >= 1 where launched)
  explicit ItemDivisors(const Args& a)
      : by_blocks(a.v_blocks > 0 ? a.v_blocks : 1), by_heads(a.HV > 0 ? a.HV : 1),
        by_group(a.H > 0 && a.HV >= a.H ? a.HV / a.H : 1) {}
  // WorkItem(a, item) for item < 2^31 (any CTA index).
  template <class Args>
  __device__ WorkItem item(const Args& a, int item) const {
    int rest, vb, n, hv, h, lane;
    by_blocks(rest, vb, item);
    by_heads(n, hv, rest);
    by_group(h, lane, hv);
    return WorkItem(a, n, hv, vb, h);
  }
};

// The value head's qk head, without qk_head_of's two 64-bit divisions where HV == H (no GVA):
// for kernels where per-item index math shows (the WY kernel's 8,192 short CTAs at B4, the
// gradient kernel's three WorkItems an item).
template <class Args>
__device__ int qk_head_fast(const Args& a, int hv) {
  return a.HV == a.H ? hv : static_cast<int>(qk_head_of(hv, a.HV, a.H));
}

// The WY kernel's grid.x: slots for every chunk of `seqs` sequences of `tokens` tokens each
// (dense), or of `tokens` tokens in all (varlen) — see ChunkSlot.
inline int64_t wy_slot_count(int64_t tokens, int64_t seqs, bool varlen) {
  return varlen ? tokens / 64 + seqs : seqs * ((tokens + 63) / 64);
}

// The WY kernel's CTA (blockIdx.x = slot, blockIdx.y = value head) -> (sequence n, chunk j).
// Dense: slot = n * chunks_per_sequence + j. Varlen: sequence n's chunks take the slots from
// first(n) = floor(cu[n] / 64) + n on; first(n + 1) - first(n) >= ceil(len_n / 64), so the ranges
// are disjoint and floor(total / 64) + N slots cover every chunk (a slot past its sequence's last
// chunk has nothing to do). first() increases with n: the owner of a slot is found by bisection.
struct ChunkSlot {
  int n = 0, j = 0;
  bool live = false;
  ChunkSlot() = default;
  // The slot of sequence n's first chunk (its chunk j has slot first(a, n) + j).
  template <class Args>
  __host__ __device__ static int64_t first(const Args& a, int n) {
    return a.cu_seqlens ? a.cu_seqlens[n] / 64 + n : int64_t(n) * ((a.tokens + 63) / 64);
  }
  // The same for a work item's sequence, without the load: a varlen item's t0 is cu_seqlens[n]
  // (varlen batches are never split: plan_split_for). Kernels that reread cu_seqlens[n] per chunk
  // or per item waited on it (ncu: 4% of the rerun's samples, 1.8% of the gradient kernel's).
  template <class Args>
  __device__ static int64_t first(const Args& a, const WorkItem& it) {
    return a.cu_seqlens ? it.t0 / 64 + it.n : first(a, it.n);
  }
  template <class Args>  // any kernel's arguments with cu_seqlens, tokens and num_seqs
  __host__ __device__ ChunkSlot(const Args& a, int64_t slot) {
    if (!a.cu_seqlens) {
      const int64_t per_seq = (a.tokens + 63) / 64;
      if (slot <= INT32_MAX && per_seq <= INT32_MAX) {  // 32 bits: a 64-bit division is a long software routine
        n = static_cast<int>(static_cast<uint32_t>(slot) / static_cast<uint32_t>(per_seq));
        j = static_cast<int>(static_cast<uint32_t>(slot) % static_cast<uint32_t>(per_seq));
      } else {
        n = static_cast<int>(slot / per_seq);
        j = static_cast<int>(slot % per_seq);
      }
      live = n < a.num_seqs;
      return;
    }
    int lo = 0, hi = a.num_seqs - 1;  // the last m with first(a, m) <= slot
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (first(a, mid) <= slot) lo = mid;
      else hi = mid - 1;
    }
    *this = in_sequence(a, slot, lo);
  }
  // A varlen slot's chunk once its sequence n is known (the last whose first slot is <= slot).
  template <class Args>
  __host__ __device__ static ChunkSlot in_sequence(const Args& a, int64_t slot, int n) {
    ChunkSlot s;
    s.n = n;
    const int64_t t0 = a.cu_seqlens[n], len = a.cu_seqlens[n + 1] - t0, j = slot - (t0 / 64 + n);
    s.live = j * 64 < len;
    s.j = static_cast<int>(j);
    return s;
  }
  // The same for slot < 2^31, a dense batch's (n, j) by a precomputed divisor of the chunks a
  // sequence (a cutlass::FastDivmod: a multiply-high and a shift, not a division sequence).
  template <class Args, class Divmod>
  __device__ ChunkSlot(const Args& a, int slot, const Divmod& by_seq_chunks) {
    if (a.cu_seqlens) {
      *this = ChunkSlot(a, int64_t(slot));
      return;
    }
    by_seq_chunks(n, j, slot);
    live = n < a.num_seqs;
  }
};

// A varlen slot's record in the backward's slot table (ChunkBwdArgs::slot_items): {sequence, chunk
// (-1 past the sequence's last), the sequence's first row, its length}, the rows in 32 bits (the
// table is made only where they fit).
template <class Args>
__device__ int4 slot_record(const Args& a, const ChunkSlot& s) {
  const int64_t t0 = a.cu_seqlens[s.n], len = a.cu_seqlens[s.n + 1] - t0;
  return make_int4(s.n, s.live ? s.j : -1, static_cast<int>(t0), static_cast<int>(len));
}

}  // namespace attnkit::cuda::gdn
