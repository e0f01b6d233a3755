// src/cuda/gdn/chunk_fwd_wu.cuh — warpgroup 2 of the inference recurrence kernel, and of the
// backward's rerun when the forward kept T (gdn_chunk_fwd_wu_kernel, chunk_fwd_kernel.cuh): forms
// each chunk's w and u in shared memory from what the loader landed, so they never go through
// global memory (the rerun writes w out for bwd_dhu).
//
// The WY kernel then writes only [Tu | Tw] (16-bit, [C, 2C] per chunk: the same values it would
// have multiplied by V and K itself) into w's workspace rows, and the loader lands them in w's
// buffer and this CTA's columns of V in u's buffer. Per chunk, one chunk ahead of the state
// warpgroup (the loader runs two ahead), transposed like the state warpgroup's products, so that
// the results go back into row-major tiles by stmatrix.trans (transposed_fragments.cuh) from one
// address per tile instead of an address per register pair:
//   u^T = V^T Tu^T               [BV, C]   SS (V read MN-major; Tu, the first C columns of w's buffer)
//   w^T = K^T Tw^T, in halves    [DK/2, C] SS (K read MN-major; Tw, the next C columns)
// then u over V and w over [Tu | Tw] once every warp's GEMMs are done reading them. While the
// GEMMs run it works out the state warpgroup's per-row factors (chunk_gate_factors, the loader's
// job in the two-warpgroup kernel: ncu put them at half the loader's time, which bounded the
// chunk step once the state's own pass got shorter); then "full" hands the stage to the state
// warpgroup, which sees exactly the WY kernel's w and u. Rows past the sequence end: Tu's and Tw's are zeros, V's zeroed by the loader, so
// u's and w's are zeros, as the WY kernel's were.
#pragma once
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_load.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"
#include "src/cuda/gdn/chunk_gates.cuh"
#include "src/cuda/gdn/transposed_fragments.cuh"

namespace attnkit::cuda::gdn {

// kFromT (the backward's rerun from the forward's kept T, kStates): w's buffer holds T's [C, C]
// rows as landed; before the GEMMs this warpgroup forms the chunk's gates (warp 0, loaded a chunk
// ahead: gamma into sm.gamma, and to the workspace from value block 0), K's norms and the state's
// row factors (chunk_gate_factors), then Tu = T diag(beta) over T and Tw = T diag(beta n exp(gamma))
// beside it — the [Tu | Tw] the WY kernel would have written.
template <class T, bool kFromT = false>
struct WuWarpgroup {
  using Element = typename T::Element;
  static constexpr int kC = T::kC, kDK = T::kDK, kBV = T::kBV;
  static_assert(2 * kC == kDK, "[Tu | Tw] fill w's [C, DK] buffer");
  const ChunkFwdArgs& a;
  const WorkItem& it;
  int tid;  // 0..127

  static CUTE_DEVICE void sync() { ChunkBarriers::sync(ChunkBarriers::kWu, 128); }

  // kFromT: chunk j's gates, row factors and [Tu | Tw] in stage s (see above). g, beta_bits: this
  // lane's gates of chunk j (warp 0), replaced by chunk j + 1's.
  CUTE_DEVICE void form_t_operands(int j, int s, float (&g)[2], uint32_t (&beta_bits)[2]) const {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    if (tid < 32) {
      finish_chunk_gates<true>(a, it, j, tid, g, beta_bits, sm.gamma[s], sm.t_cols[s][0], it.vb == 0 ? static_cast<float*>(a.gamma.ptr) : nullptr);
      if (j + 1 < it.nchunks) load_chunk_gates(a, it, j + 1, tid, g, beta_bits);  // their latency behind this chunk
    }
    sync();  // gamma, beta
    chunk_gate_factors<T, Recurrence::kStates>(a, it, tid, j);  // K's norms (gate[s][3]) and D's factors
    sync();
    if (tid < kC) sm.t_cols[s][1][tid] = sm.t_cols[s][0][tid] * sm.gate[s][3][tid] * ex2(sm.gamma[s][tid]);
    sync();
    // Tu over T, Tw in the next [C, C] tile, by 16-byte pieces (8 columns of a row).
    Element* t_tile = sm.stage[s].w.data();
    const ChunkPieces<kC, typename T::LayoutCC> pieces(tid, t_tile);
    const uint32_t tu = cute::cast_smem_ptr_to_uint(t_tile), tw = tu + kC * kC * sizeof(Element);
    float fu[8], fw[8];
    CUTE_UNROLL
    for (int e = 0; e < 8; ++e) fu[e] = sm.t_cols[s][0][pieces.c + e], fw[e] = sm.t_cols[s][1][pieces.c + e];
    CUTE_UNROLL
    for (int i = 0; i < decltype(pieces)::kPieces; ++i) {
      const uint4 t = ld_shared_v4(tu + pieces.offset[i]);
      const uint32_t in[4] = {t.x, t.y, t.z, t.w};
      uint32_t u_out[4], w_out[4];
      CUTE_UNROLL
      for (int e = 0; e < 4; ++e) {
        const float2 x = unpack2<Element>(in[e]);
        u_out[e] = pack2<Element>(x.x * fu[2 * e], x.y * fu[2 * e + 1]);
        w_out[e] = pack2<Element>(x.x * fw[2 * e], x.y * fw[2 * e + 1]);
      }
      st_shared(tu + pieces.offset[i], make_uint4(u_out[0], u_out[1], u_out[2], u_out[3]));
      st_shared(tw + pieces.offset[i], make_uint4(w_out[0], w_out[1], w_out[2], w_out[3]));
    }
    cutlass::arch::fence_view_async_shared();  // the GEMMs read them
    sync();
  }

  CUTE_DEVICE void run() {
    auto& sm = chunk_smem<typename T::SharedStorage>();
    float g2[2];
    uint32_t b2[2];
    if constexpr (kFromT)
      if (tid < 32 && it.nchunks > 0) load_chunk_gates(a, it, 0, tid, g2, b2);
    typename T::MmaWu mma;  // [64, C] = [64, C] . [C, C]^T: u^T and w^T's halves
    auto thr = mma.get_thread_slice(tid);
    using Tile = Shape<Int<64>, Int<kC>>;
    Tensor tU = partition_fragment_C(mma, Tile{});   // fp32 [BV, C]: u^T
    Tensor tW0 = partition_fragment_C(mma, Tile{});  // fp32 [DK / 2, C]: w^T's rows 0..63
    Tensor tW1 = partition_fragment_C(mma, Tile{});  //                     and 64..127
    constexpr int kPairs = decltype(size(tU))::value / 2;
    const NormsOut norms_out = kFromT ? NormsOut{} : NormsOut::of<kC>(a, it, tid);
    for (int j = 0; j < it.nchunks; ++j) {
      const int s = j % T::kStages;
      auto& st = sm.stage[s];
      Tensor sTu = make_tensor(make_smem_ptr(st.w.data()), typename T::LayoutCC{});            // [C, C]
      Tensor sTw = make_tensor(make_smem_ptr(st.w.data() + kC * kC), typename T::LayoutCC{});  // [C, C]
      Tensor sVt = make_tensor(make_smem_ptr(st.u.data()), typename T::LayoutRowsBVt{});       // [BV, C]: V^T, then u^T
      Tensor sKt = make_tensor(make_smem_ptr(st.k.data()), typename T::LayoutRowsDKt{});       // [DK, C]: K^T
      Tensor sWt = make_tensor(make_smem_ptr(st.w.data()), typename T::LayoutRowsDKt{});       // [DK, C]: w^T
      ChunkBarriers::sync(ChunkBarriers::kLanded + s, 256);
      if constexpr (kFromT) form_t_operands(j, s, g2, b2);
      attn::gemm_ss_zero(mma, thr.partition_fragment_A(sVt), thr.partition_fragment_B(sTu), tU);
      attn::gemm_ss_zero(mma, thr.partition_fragment_A(local_tile(sKt, Tile{}, make_coord(0, 0))), thr.partition_fragment_B(sTw), tW0);
      attn::gemm_ss_zero(mma, thr.partition_fragment_A(local_tile(sKt, Tile{}, make_coord(1, 0))), thr.partition_fragment_B(sTw), tW1);
      if constexpr (!kFromT) chunk_gate_factors<T, Recurrence::kOutput>(a, it, tid, j, norms_out);  // while the GEMMs run
      warpgroup_wait<0>();
      sync();  // every warp's reads of Tu, Tw, V are done
      auto store = [&](const auto& acc, auto&& tile) {
        uint32_t pairs[kPairs];
        CUTE_UNROLL
        for (int p = 0; p < kPairs; ++p) pairs[p] = pack2<Element>(acc(2 * p), acc(2 * p + 1));
        store_transposed(pairs, tile);
      };
      store(tU, sVt);
      store(tW0, local_tile(sWt, Tile{}, make_coord(0, 0)));
      store(tW1, local_tile(sWt, Tile{}, make_coord(1, 0)));
      cutlass::arch::fence_view_async_shared();  // the state warpgroup's WGMMAs read them
      ChunkBarriers::arrive(ChunkBarriers::kFull + s, 256);  // the stage, with its row factors, to the state warpgroup
    }
  }
};

}  // namespace attnkit::cuda::gdn
