// src/cuda/attention/bwd_prepost.cuh — the small kernels around the backward main kernel.
//
//  preprocess:  per query row, delta = rowsum(dO * O) (fp32) and lse2 = lse * log2(e), into the
//               padded-row buffers (padding and rows with no visible key get lse2 = +inf, delta 0);
//               and zeroes the query tile's dQ semaphores and claim, the head's done count, and
//               its dq_accum block only where a.dq_zeroed (otherwise the first writer of a tile
//               stores: bwd_dq_writer.cuh).
//  dq:          dq = scale * dq_accum (its chains' copies summed in chain order), read back in the
//               MMA order the main kernel staged it in; each head as soon as the main kernel's key
//               tiles of that head are done (AttnBwdArgs::dq_after_heads).
//  dkv (GQA):   dk, dv = the fp32 kv-head buffer (atomic), or the ordered sum over the query heads
//               of the group (split), converted.
#pragma once
#include "src/cuda/attention/bulk.cuh"  // load_acquire
#include "src/cuda/attention/bwd_tile.cuh"
#include "src/cuda/attention/bwd_traits.cuh"
#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/programmatic_launch.cuh"

namespace attnkit::cuda::attn {

// Query tile m (kBwdBlockM rows) of (head h, sequence b) by 256 threads (t); false past the
// sequence's padded rows. The tile's O and dO rows are read in 16-byte pieces, piece
// p = 256 i + t for thread t in pass i, so a row's D / 8 pieces lie on adjacent lanes and its delta
// is a shuffle sum among them; every load of the tile is issued before the first sum (a warp per
// row with 2-byte loads ran at ~2.4 TB/s at D128 and ~1.6 TB/s at D64: docs/perf/attention_bwd.md,
// "Preprocess").
template <class Element, int kHeadDim>
CUTE_DEVICE bool preprocess_tile(const AttnBwdArgs& a, int m, int h, int b, int t) {
  constexpr int kRowPieces = kHeadDim / 8;              // 16-byte pieces a row: 8 / 16 / 32
  constexpr int kRowsPerPass = 256 / kRowPieces;        // 32 / 16 / 8
  constexpr int kPasses = kBwdBlockM / kRowsPerPass;    // 2 / 4 / 8
  static_assert(kRowPieces <= 32 && kBwdBlockM % kRowsPerPass == 0);
  const SeqInfo seq(a, b);
  if (m == 0 && t == 0) a.dq_heads_done[b * a.heads_q + h] = 0;
  if (m * kBwdBlockM >= seq.seqlen_q) return false;
  const bool varlen = a.cu_seqlens_q != nullptr;
  const Element* o = static_cast<const Element*>(a.out) + (varlen ? 0 : b * a.o_stride[0]) + h * a.o_stride[2];
  const Element* g = static_cast<const Element*>(a.dout) + (varlen ? 0 : b * a.do_stride[0]) + h * a.do_stride[2];
  // Rows start 16-byte aligned: check_bwd_tma_operands asks out and dout for 16-byte aligned
  // pointers and strides (TMA's rule), so 16-byte loads are always legal here.
  const int col = (t % kRowPieces) * 8;
  // The rows' lse, issued with the O and dO loads (one DRAM round trip a block, not two): read by
  // the first thread of each row's pieces.
  float lse[kPasses];
  CUTE_UNROLL
  for (int i = 0; i < kPasses; ++i) {
    const int r = m * kBwdBlockM + i * kRowsPerPass + t / kRowPieces;
    lse[i] = t % kRowPieces == 0 && r < seq.seqlen_q
                 ? a.lse[(varlen ? 0 : b * a.lse_stride[0]) + h * a.lse_stride[1] + (int64_t(seq.offset_q) + r) * a.lse_stride[2]]
                 : -INFINITY;
  }
  float part[kPasses];  // this thread's share of its row's delta, per pass
  CUTE_UNROLL
  for (int i = 0; i < kPasses; ++i) {
    const int r = m * kBwdBlockM + i * kRowsPerPass + t / kRowPieces;
    part[i] = 0.f;
    if (r >= seq.seqlen_q) continue;
    const int64_t token = int64_t(seq.offset_q) + r;
    const Element* orow = o + token * a.o_stride[1] + col;
    const Element* grow = g + token * a.do_stride[1] + col;
    const auto ov = *reinterpret_cast<const cutlass::AlignedArray<Element, 8>*>(orow);
    const auto gv = *reinterpret_cast<const cutlass::AlignedArray<Element, 8>*>(grow);
    CUTE_UNROLL
    for (int e = 0; e < 8; ++e) part[i] += float(ov[e]) * float(gv[e]);
  }
  const int64_t row0 = int64_t(h) * a.rows_padded + bwd_row_base(a, b, seq.offset_q) + int64_t(m) * kBwdBlockM;
  if (t <= a.dq_chains) a.dq_semaphore[(a.chain_row0(t) + row0) / kBwdBlockM] = 0;  // each chain's, then the claim
  if (a.dq_zeroed) {  // one chain: the tile's kBwdBlockM * D floats (MMA order), contiguous
    float4* acc = reinterpret_cast<float4*>(a.dq_accum + row0 * kHeadDim);
    CUTE_UNROLL
    for (int j = t; j < kBwdBlockM * kHeadDim / 4; j += 256) acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  CUTE_UNROLL
  for (int i = 0; i < kPasses; ++i) {
    float delta = part[i];
    CUTE_UNROLL
    for (int w = kRowPieces / 2; w > 0; w /= 2) delta += __shfl_xor_sync(0xffffffff, delta, w);
    const int lr = i * kRowsPerPass + t / kRowPieces, r = m * kBwdBlockM + lr;  // rows past Sq: padding
    if (t % kRowPieces != 0) continue;
    // padding, and rows that see no key (lse = -inf): +inf
    const float lse2 = r < seq.seqlen_q && lse[i] != -INFINITY ? lse[i] * float(M_LOG2E) : INFINITY;
    a.delta[row0 + lr] = delta;
    a.lse2[row0 + lr] = lse2;
  }
  return true;
}

// grid (query tiles of the longest sequence x heads_q, batch), 256 threads: a block per query tile,
// heads fastest, so that the blocks running at once read whole token rows of O and dO ([S, H, D]:
// all heads of a run of tokens) rather than one head's 256-byte pieces 4 KB apart.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(256) attention_bwd_preprocess_kernel(const AttnBwdArgs a) {
  const int h = blockIdx.x % a.heads_q, m = blockIdx.x / a.heads_q;
  preprocess_tile<Element, kHeadDim>(a, m, h, blockIdx.y, threadIdx.x);
  // Launched to overlap the kernel ahead (AttnBwdArgs::preprocess_after_trigger): not done before it is.
  wait_for_prerequisites();
}

// The preprocess beside the main kernel (AttnBwdArgs::preprocess_sms): a.preprocess_sms blocks of
// 3 x 256 threads, each group taking query tiles in the main kernel's order (tile, head, sequence)
// and counting each done tile for its head (AttnBwdArgs::preprocessed_tiles; tile 0 of every head
// even when it is empty, so that every head's count reaches at least 1). Each block asks for more
// than half an SM's shared memory, never used: one block an SM, and the main kernel, launched to
// start at once, has the other SMs to itself while this one streams O and dO.
inline constexpr int kPreprocessBesideSmem = 120 * 1024;
inline constexpr int kPreprocessBesideGroups = 3;  // (4 spilled on the 64 registers of 1024 threads)
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(256 * kPreprocessBesideGroups, 1) attention_bwd_preprocess_beside_kernel(const AttnBwdArgs a) {
  allow_dependents_to_start();  // the main kernel, on the other SMs
  const int group = threadIdx.x / 256, t = threadIdx.x % 256;
  const int m_tiles = (a.max_seqlen_q + kBwdBlockM - 1) / kBwdBlockM, heads = a.heads_q * a.batch;
  // Tile i = head_index * m_tiles + m: this group's first, then every (groups * gridDim.x)-th,
  // stepped without a division per tile.
  const int first = blockIdx.x * kPreprocessBesideGroups + group, step = gridDim.x * kPreprocessBesideGroups;
  int m = first % m_tiles, hb = first / m_tiles;
  const int step_m = step % m_tiles, step_hb = step / m_tiles;
  auto advance = [&] {
    m += step_m;
    hb += step_hb;
    if (m >= m_tiles) m -= m_tiles, ++hb;
  };
  bool after_prerequisites = false;
  for (; hb < heads; advance()) {
    const int h = hb % a.heads_q, b = hb / a.heads_q;  // (uniform in the group)
    if (!preprocess_tile<Element, kHeadDim>(a, m, h, b, t) && m > 0) continue;
    // Flex's list kernels run ahead of this one (preprocess_after_trigger): complete before the
    // first count, so that a main kernel CTA that saw its head counted sees its lists too.
    if (!after_prerequisites) wait_for_prerequisites();
    after_prerequisites = true;
    cutlass::arch::NamedBarrier::sync(256, 1 + group);  // the group's writes, then the count
    if (t == 0) red_release_add(a.preprocessed_tiles + b * a.heads_q + h, 1);
  }
  wait_for_prerequisites();
}

// grid (query tiles of the longest sequence, heads_q, batch), 256 threads: thread t takes the
// registers consumer thread t staged. With a.dq_after_heads it is launched to start beside the main
// kernel's last CTAs (bwd_launch.cuh): each block first waits until every key tile of its head has
// counted its dQ in, and block (0, 0, 0) waits at its end for the whole main kernel, so that the
// stream moves on (GQA's dk / dv, the caller's next kernel) only once the main kernel is done.
template <class Traits>
__global__ void __launch_bounds__(256) attention_bwd_dq_kernel(const AttnBwdArgs a) {
  using T = Traits;
  using Element = typename T::Element;
  const int m = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  const SeqInfo seq(a, b);
  const bool holds_stream = a.dq_after_heads && m == 0 && h == 0 && b == 0;
  if (m * T::kBlockM >= seq.seqlen_q) {
    if (holds_stream) wait_for_prerequisites();
    return;
  }
  if (a.dq_after_heads) {
    if (t == 0) wait_for_count(a.dq_heads_done + b * a.heads_q + h, (a.max_seqlen_k + T::kBlockN - 1) / T::kBlockN);
    __syncthreads();
  }
  typename T::TiledMmadQ mma;
  Tensor acc = partition_fragment_C(mma, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});  // fp32 [M, D/2] / 128 threads
  const int64_t rows = int64_t(h) * a.rows_padded + bwd_row_base(a, b, seq.offset_q) + m * T::kBlockM;
  clear(acc);
  for (int chain = 0; chain < a.dq_chains; ++chain) {  // in chain order: the same bits every run
    if (!a.dq_zeroed && a.dq_semaphore[(a.chain_row0(chain) + rows) / T::kBlockM] == 0) continue;  // nobody wrote this copy
    const float4* src = reinterpret_cast<const float4*>(a.dq_accum + (a.chain_row0(chain) + rows) * T::kHeadDim);
    CUTE_UNROLL
    for (int j = 0; j < size(acc) / 4; ++j) {
      const float4 v = src[j * 256 + t];
      acc(4 * j) += v.x;
      acc(4 * j + 1) += v.y;
      acc(4 * j + 2) += v.z;
      acc(4 * j + 3) += v.w;
    }
  }
  Tensor acc_rc = as_rowcol(acc);
  Tensor c_rc = as_rowcol(mma.get_thread_slice(t).partition_C(make_identity_tensor(Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{})));
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) acc(i) *= a.scale;
  // 16-byte row stores (fragment.cuh; dq is checked 16-byte aligned), every row transposed first.
  constexpr int kRows = decltype(size<0>(acc_rc))::value;
  uint32_t words[kRows][kRunsOf<decltype(acc_rc)>][4];
  CUTE_UNROLL
  for (int mi = 0; mi < kRows; ++mi) quad_transpose_row<Element>(acc_rc, mi, words[mi]);
  const bool varlen = a.cu_seqlens_q != nullptr;
  Element* out = static_cast<Element*>(a.dq) + (varlen ? 0 : b * a.dq_stride[0]) + h * a.dq_stride[2];
  CUTE_UNROLL
  for (int mi = 0; mi < kRows; ++mi) {
    const int row = m * T::kBlockM + get<0>(c_rc(mi, 0));
    if (row >= seq.seqlen_q) continue;
    store_row_16b(words[mi], c_rc, mi, out + (int64_t(seq.offset_q) + row) * a.dq_stride[1]);
  }
  if (holds_stream) wait_for_prerequisites();
}

// GQA only. grid-stride over (row_k, kv head, column pair); rows_k = keys of all sequences.
template <class Element>
__global__ void __launch_bounds__(256) attention_bwd_dkv_kernel(const AttnBwdArgs a, int64_t rows_k) {
  const int D = a.head_dim, group = a.heads_q / a.heads_kv;
  const int64_t pairs = rows_k * a.heads_kv * (D / 2);
  const bool varlen = a.cu_seqlens_k != nullptr;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pairs; i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % (D / 2)) * 2;
    const int hk = int(i / (D / 2) % a.heads_kv);
    const int64_t row = i / (D / 2) / a.heads_kv;
    const int64_t bb = varlen ? 0 : row / a.seqlen_k, token = varlen ? row : row % a.seqlen_k;
    for (int which = 0; which < 2; ++which) {
      const float* acc = which == 0 ? a.dk_accum : a.dv_accum;
      float x0 = 0.f, x1 = 0.f;
      if (a.split_dkv) {
        for (int g = 0; g < group; ++g) {  // ascending query head: a fixed order
          const float* p = acc + (row * a.heads_q + hk * group + g) * D + c;
          x0 += p[0];
          x1 += p[1];
        }
      } else {
        const float* p = acc + (row * a.heads_kv + hk) * D + c;
        x0 = p[0];
        x1 = p[1];
      }
      const int64_t* st = which == 0 ? a.dk_stride : a.dv_stride;
      Element* out = static_cast<Element*>(which == 0 ? a.dk : a.dv) + bb * st[0] + token * st[1] + hk * st[2] + c;
      cutlass::Array<Element, 2> pair;
      pair[0] = Element(x0);
      pair[1] = Element(x1);
      *reinterpret_cast<cutlass::Array<Element, 2>*>(out) = pair;
    }
  }
}

}  // namespace attnkit::cuda::attn
