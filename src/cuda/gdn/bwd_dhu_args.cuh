// src/cuda/gdn/bwd_dhu_args.cuh — the arguments of the reverse state-gradient kernel ("bwd_dhu",
// attnkit/gdn.hpp GdnBwdDhuParams); its CTAs find their work with chunk_fwd_args.cuh's WorkItem.
#pragma once
#include <cstdint>

#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/row_tma.cuh"

namespace attnkit::cuda::gdn {

struct BwdDhuArgs {
  RowTensor q, k;                  // [B, T, H, DK]
  RowTensor w;                     // [B, T, HV, DK]
  RowTensor dout, dv, dv2;         // [B, T, HV, V]
  // The op's l2norm on raw q, k rows (ChunkBwdArgs::fold_norms): their rows' inverse norms (fp32
  // [B, T, H]), folded into the row factors fq, fk and the local warpgroup's P. Absent: q, k as given.
  RowTensor rstd_q, rstd_k;
  // In-chunk cumulative log-decay (natural log), fp32: g [B, T, HV] (scalar gate) or
  // gk [B, T, HV, DK] (per key, unit last stride; q and k come already gated); neither: no decay.
  const float* gate = nullptr;
  int64_t g_sb = 0, g_st = 0, g_sh = 0;
  bool per_key_gate = false;
  float gate_log2 = 1.4426950408889634f;  // gate -> log2 units (1 where it comes in log2 units)
  StateTensor dht;                 // any float dtype; absent: zero
  // dh [B, NT, HV, K, V] / [.., V, K] in the rows' dtype: element strides of (b, chunk, hv, k, v).
  void* dh = nullptr;
  int64_t dh_sb = 0, dh_sc = 0, dh_sh = 0, dh_sk = 0, dh_sv = 0;
  float* dh0 = nullptr;            // fp32 [N, HV, K, V] / [N, HV, V, K]; absent: not written
  int64_t dh0_sn = 0, dh0_sh = 0, dh0_sk = 0, dh0_sv = 0;
  const int64_t* cu_seqlens = nullptr;    // varlen: B == 1
  const int64_t* chunk_offsets = nullptr; // varlen: first global chunk of each sequence [N]
  int64_t tokens = 0;                     // T of a dense batch
  int num_seqs = 0, H = 0, HV = 0, v_blocks = 0;
  float scale = 1.f;
  bool vec16 = false;                     // q, k, w, dout, dv rows 16-byte aligned: TMA, else cp.async
  bool dv2_vec16 = false;                 // dv2 rows 16-byte aligned
  bool dh_vec16 = false;                  // dh rows (K-first, unit v stride) 16-byte aligned: TMA stores
  int dh_chunks = 0, dh_batch = 0;        // dh's chunk and batch extents (its TMA descriptor)
  // The chunked backward's dv worked out in the kernel (BwdDhuTraits::kLocal, bwd_dhu_local.cuh;
  // value block 64, vec16, no split, scalar gate or none): dv absent.
  bool local = false;
  // The reverse chain's sequence split (bwd_dhu_split.cuh; dense batches with vec16 only):
  // segments numbered from the end, starts / prods as the forward's, DK / BV virtual blocks.
  SegmentSplit split;
};

// Row r's inverse norms {rstd_q, rstd_k}, step by step (the sequence's chunks from its last), or
// {1, 1} where q, k come as given (a.rstd_q absent), past the sequence's end (rows of zeros: any
// finite factor does) or past its first chunk. The loader's gate half and the local warpgroup
// load them steps ahead, each call the next step's. Pointers worked out once an item and stepped
// back a chunk per call: the 64-bit row address at every step was ~60 of the ~200 SASS
// instructions the fold added to bwd_dhu's per-step code.
struct DhuRowNorms {
  const float* q = nullptr;  // this step's row (null: no fold)
  const float* k = nullptr;
  int64_t chunk_q = 0, chunk_k = 0;  // a chunk's rows
  int left = 0;                      // steps left
  bool past_end = false;             // this step's row lies past the sequence's end (step 0 only)
  CUTE_DEVICE DhuRowNorms(const BwdDhuArgs& a, const WorkItem& it, int r) {
    if (!a.rstd_q.ptr || it.nchunks <= 0) return;
    const int64_t t = int64_t(it.nchunks - 1) * 64 + r;
    q = static_cast<const float*>(a.rstd_q.ptr) + it.row(a.rstd_q, t, it.h);
    k = static_cast<const float*>(a.rstd_k.ptr) + it.row(a.rstd_k, t, it.h);
    chunk_q = 64 * a.rstd_q.st;
    chunk_k = 64 * a.rstd_k.st;
    left = it.nchunks;
    past_end = r >= it.valid_rows(it.nchunks - 1);
  }
  CUTE_DEVICE float2 next() {
    if (left <= 0) return make_float2(1.f, 1.f);
    const float2 x = past_end ? make_float2(1.f, 1.f) : make_float2(*q, *k);
    q -= chunk_q;
    k -= chunk_k;
    --left;
    past_end = false;
    return x;
  }
};

// dh as (k, v, chunk, value head, batch), v contiguous: the TMA store of a [DK, BV] tile.
using DhShape = Shape<int32_t, int32_t, int32_t, int32_t, int32_t>;
using DhStride = Stride<int64_t, _1, int64_t, int64_t, int64_t>;
template <class Element>
using DhGmem = decltype(make_tensor(make_gmem_ptr(static_cast<Element*>(nullptr)), DhShape{}, DhStride{}));

// The kernel's parameters: the arguments and, for one (element, DK, BV), the rows' TMA descriptors
// (built when vec16; unused otherwise). T: BwdDhuTraits.
template <class T>
struct BwdDhuParams {
  BwdDhuArgs a;
  ItemDivisors items;                    // blockIdx.x -> (sequence, value head, value block)
  RowsShape shape_qk, shape_w, shape_v;  // (t, d, head, batch) of q / k, w, do / dv (row_tma.cuh)
  typename T::TmaRowsDK tma_q, tma_k, tma_w;
  typename T::TmaRowsBV tma_do, tma_dv;
  DhShape shape_dh;                      // built when dh_vec16
  typename T::TmaDh tma_dh;
};

}  // namespace attnkit::cuda::gdn
