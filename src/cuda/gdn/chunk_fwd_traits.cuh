// src/cuda/gdn/chunk_fwd_traits.cuh — compile-time shape of the chunked forward for one (element
// type, key head dim DK): chunk and value-block sizes, swizzled shared-memory layouts, WGMMA types.
//
// Two kernels (spec/gdn.md, chunked forward; C = 64 tokens a chunk):
// The WY kernel, one CTA per (chunk, value head), all chunks at once (chunk_fwd_wy.cuh):
//   S_kk = K K^T                                    [C, C]     SS (K as loaded; n: its rows' inverse norms, or 1)
//   T0 = (I + strict(diag(beta n) S_kk diag(n)))^-1 [C, C]     fp32 + TF32 mma.sync, chunk_fwd_solve.cuh
//   u = (T0 diag(beta) * Gamma) V                   [C, DK]    RS (V = DK), into V's buffer
//   w = (T0 diag(beta n) * exp(gamma_r)) K          [C, DK]    RS (K read MN-major), into K's buffer
//   (or, for the recurrence's w / u warpgroup, only the 16-bit rows [Tu | Tw], chunk_fwd_wu.cuh)
// The recurrence kernel, one CTA per (sequence, value head, 64 value columns): warpgroup 0 loads
// chunk j+2 (chunk_fwd_load.cuh), warpgroup 1 carries the fp32 state, transposed, H^T [BV, DK]
// through chunk j (chunk_fwd_state.cuh):
//   v_new^T = u^T - H^T w^T ;  O^T = H^T Q^T         [BV, C]    RS (w, Q read K-major)
//   S^T = K Q^T -> Aqk^T = scale * tril(S)^T * Gamma^T  [C, C]  SS, to shared memory
//   O^T = scale exp(gamma) O^T + v_new^T Aqk^T       [BV, C]    RS (Aqk^T read MN-major)
//   H^T = exp(gamma_last) H^T + (exp(gamma_last - gamma) v_new)^T K   [BV, DK]   RS, K MN-major
// Several layouts below view the same bytes: a [rows, cols] tile with cols contiguous is K-major
// as [rows, cols] and MN-major as [cols, rows] (tile_to_shape with Step<_2, _1>); the host test
// GdnChunkLayouts checks the pairs agree element by element.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/gemm/collective/builders/sm90_common.inl>
#include <cutlass/numeric_conversion.h>

#include "src/cuda/gdn/chunk_fwd_solve.cuh"
#include "src/cuda/gdn/row_tma.cuh"

namespace attnkit::cuda::gdn {

using namespace cute;

// [rows, cols] with cols contiguous, as a K-major operand.
template <class Element, int kRows, int kCols>
using RowMajor = decltype(tile_to_shape(
    cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, Int<kRows>, Int<kCols>>(),
    Shape<Int<kRows>, Int<kCols>>{}));
// The same bytes as [cols, rows], an MN-major operand.
template <class Element, int kRows, int kCols>
using RowMajorT = decltype(tile_to_shape(
    cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::MN, Element, Int<kCols>, Int<kRows>>(),
    Shape<Int<kCols>, Int<kRows>>{}, Step<_2, _1>{}));

template <class Element_, int kDK_>
struct ChunkFwdTraits {
  using Element = Element_;
  static constexpr int kDK = kDK_;   // key head dim: rows of the state
  static constexpr int kBV = 64;     // value columns per CTA
  static constexpr int kC = 64;      // chunk length
  static constexpr int kStages = 3;  // recurrence kernel: chunk j in use, j+1 and j+2 loading
  static constexpr int kThreads = 256;
  // The inference kernel that forms w and u itself (chunk_fwd_wu.cuh) has a third warpgroup; the
  // CTA's registers (168 a thread at launch: 64K / 384, in multiples of 8) are re-split by
  // setmaxnreg: loader, state (H^T and its GEMMs), w / u. More than the launch's pool and the
  // state warpgroup's setmaxnreg.inc would wait forever.
  static constexpr int kThreadsWu = 384;
  static constexpr int kLoadRegsWu = 96, kStateRegsWu = 240, kWuRegs = 168;
  static_assert(kLoadRegsWu + kStateRegsWu + kWuRegs <= 3 * 168, "the launch's register pool");
  static constexpr int kWyThreads = 128;
  static constexpr int kWyCtasPerSm = 4;

  using LayoutRowsDK = RowMajor<Element, kC, kDK>;    // Q, K, w   [C, DK]
  using LayoutRowsDKt = RowMajorT<Element, kC, kDK>;  // K^T       [DK, C]
  using LayoutRowsBV = RowMajor<Element, kC, kBV>;    // V, v_new, Dv  [C, BV]
  using LayoutRowsBVt = RowMajorT<Element, kC, kBV>;  // their transposes [BV, C]
  using LayoutCC = RowMajor<Element, kC, kC>;         // Aqk^T     [C keys, C queries]
  using LayoutCCt = RowMajorT<Element, kC, kC>;       // its MN-major view [C queries, C keys]
  using LayoutH = RowMajor<Element, kDK, kBV>;        // H         [DK, BV]
  using LayoutHt = RowMajorT<Element, kDK, kBV>;      // H^T       [BV, DK]

  using C_ = Int<kC>;
  using DK_ = Int<kDK>;
  using BV_ = Int<kBV>;
  using MmaS = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<C_, C_, DK_>>()));
  using MmaW = decltype(make_tiled_mma(  // w = Tw K and u = Tu V, half of the columns at a time
      GMMA::rs_op_selector<Element, Element, float, Shape<C_, Int<kDK / 2>, C_>, GMMA::Major::K, GMMA::Major::MN>()));
  using MmaU = decltype(make_tiled_mma(  // O^T += v_new^T Aqk^T
      GMMA::rs_op_selector<Element, Element, float, Shape<C_, BV_, C_>, GMMA::Major::K, GMMA::Major::MN>()));
  using MmaVt = decltype(make_tiled_mma(  // H^T w^T and H^T Q^T
      GMMA::rs_op_selector<Element, Element, float, Shape<BV_, C_, DK_>, GMMA::Major::K, GMMA::Major::K>()));
  using MmaWu = decltype(make_tiled_mma(  // u^T = V^T Tu^T, w^T = K^T Tw^T (in halves) in the recurrence kernel
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<64>, C_, C_>, GMMA::Major::MN, GMMA::Major::K>()));
  using MmaHt = decltype(make_tiled_mma(  // (D v_new)^T K
      GMMA::rs_op_selector<Element, Element, float, Shape<BV_, DK_, C_>, GMMA::Major::K, GMMA::Major::MN>()));

  using TmaRowsDK = RowsTma<Element, LayoutRowsDK>;  // row_tma.cuh: Q, K, w
  using TmaRowsBV = RowsTma<Element, LayoutRowsBV>;  // u
  using TmaRowsBVStore = RowsTmaStore<Element, LayoutRowsBV>;  // o
  using TmaRowsCC = RowsTma<Element, LayoutCC>;      // T (the rerun's w / u from the forward's kept T)

  // The recurrence kernel's buffers for one chunk: rows of Q, K, w and u (this CTA's columns);
  // u's buffer then holds the chunk's output rows until the loader writes them out.
  struct Stage {
    cute::array_aligned<Element, kC * kDK, 1024> q, k, w;
    cute::array_aligned<Element, kC * kBV, 1024> u;
  };
  // kStates leaves the next start state [DK, BV] in Q's buffer and v_new in u's (chunk_fwd_state.cuh).
  static_assert(kDK * kBV <= kC * kDK, "a start state fits Q's buffer");
  struct SharedStorage {
    Stage stage[kStages];
    cute::array_aligned<Element, kDK * kBV, 1024> h;      // the state's 16-bit copy [DK, BV], for the backward
    cute::array_aligned<Element, kC * kBV, 1024> vnew[2];  // v_new [C, BV] of chunks j, j - 1, for the backward
    cute::array_aligned<Element, kC * kC, 1024> aqk;      // Aqk^T [C keys, C queries]
    alignas(8) float gamma[kStages][kC];  // in-chunk cumulative log-decay, in log2 units (exp(x) = ex2(x log2 e))
    // Per row, from the loader (n_q, n_k: the in-op l2norm's inverse row norms, else 1):
    // [0] scale n_q exp(gamma) (O's columns), [1] n_k exp(gamma_last - gamma) (D's),
    // [2] scale n_q and [3] n_k (Aqk^T's columns and rows).
    alignas(8) float gate[kStages][4][kC];
    cutlass::arch::ClusterTransactionBarrier rows_landed[kStages];  // the stage's TMA bytes (a.vec16)
    // The rerun's w / u from the forward's kept T (a.wy_from_t): T's column factors per row,
    // [0] beta (Tu = T diag(beta)) and [1] beta n_k exp(gamma) (Tw), from the w / u warpgroup.
    alignas(16) float t_cols[kStages][2][kC];
  };
  // The WY kernel's: one chunk's K and V rows (V = DK), L then T0 in fp32, the inverse's scratch.
  // V's tile comes last: the [Tu | Tw] instantiation (chunk_fwd_wu.cuh's WY half) reads no V and
  // writes its rows into K's tile, so its dynamic shared memory stops where V's tile starts
  // (kWyTPairsSmemBytes) and 5 of its CTAs fit an SM.
  struct WyStorage {
    cute::array_aligned<Element, kC * kDK, 1024> k;
    cute::array_aligned<float, kC * kLdT, 1024> t;  // L, then T0: [C, kLdT] (chunk_fwd_solve.cuh)
    cute::array_aligned<float, kSolveScratchFloats, 128> scratch;  // the inversion's 16 x 16 blocks
    alignas(16) float gamma[kC];  // 16-byte aligned: store_t reads 4 at a time
    float beta[kC];
    alignas(8) float knorm[kC];  // K's rows' inverse norms (1 without the in-op l2norm)
    cutlass::arch::ClusterTransactionBarrier rows_landed;  // K's and V's TMA bytes (a.vec16)
    int seq, chunk;  // the CTA's (n, j), read back for the stores instead of kept in registers
    cute::array_aligned<Element, kC * kDK, 1024> v;
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static constexpr int kWySmemBytes = sizeof(WyStorage);
  static constexpr int kWyTPairsSmemBytes = offsetof(WyStorage, v);
  static constexpr int kWyTPairsCtasPerSm = 5;
  static_assert(sizeof(float) * kC * kLdT >= sizeof(Element) * kC * kDK, "Q's rows fit in t's space");
  static_assert(kWyTPairsCtasPerSm * (kWyTPairsSmemBytes + 1024) <= 228 * 1024, "WY [Tu | Tw] CTAs per SM");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
  static_assert(kWyCtasPerSm * (kWySmemBytes + 1024) <= 228 * 1024, "WY CTAs per SM");
  static_assert(kC == 64, "WorkItem (chunk_fwd_args.cuh) counts chunks of 64 tokens");
};

// The recurrence kernel's parameters: the arguments and the rows' TMA descriptors (built when
// a.vec16; the loader copies by cp.async otherwise). T: ChunkFwdTraits.
template <class T>
struct ChunkFwdParams {
  ChunkFwdArgs a;
  ItemDivisors items;                // blockIdx.x -> (sequence, value head, value block)
  RowsShape shape_qk, shape_w, shape_u;  // (t, d, head, batch) of q / k, w, u
  typename T::TmaRowsDK tma_q, tma_k, tma_w;
  typename T::TmaRowsBV tma_u;
  typename T::TmaRowsBVStore tma_o;  // built when a.vec16 and a.o_vec16 (o's rows, shaped as u's)
  RowsShape shape_t;                 // T's (t, 64, HV, batch): with a.wy_from_t and a.wu_in_recurrence
  typename T::TmaRowsCC tma_t;
  // kStates with TMA rows (the backward's rerun): the kept tiles' stores (LoadWarpgroup::store_kept_tma):
  // v_new's rows (shaped as u's), w's rows (formed in the kernel, a.wy_from_t), and the start states
  // [slots, HV, K, V] seen as rows: (K, V, HV, slots).
  typename T::TmaRowsBVStore tma_vnew;
  RowsTmaStore<typename T::Element, typename T::LayoutRowsDK> tma_w_out;
  RowsShape shape_states;
  RowsTmaStore<typename T::Element, typename T::LayoutH> tma_states;
};

// The WY kernel's parameters: the arguments, TMA loads of K and V rows (built when a.vec16; by
// cp.async otherwise) and TMA stores of w and u rows (the workspace's, always 16-byte aligned).
template <class T>
struct WyParams {
  ChunkFwdArgs a;
  RowsShape shape_k, shape_v, shape_w, shape_u;  // (t, d, head, batch)
  typename T::TmaRowsDK tma_k, tma_v;
  RowsTmaStore<typename T::Element, typename T::LayoutRowsDK> tma_w, tma_u;
};

// The kernels' dynamic shared memory (T::SharedStorage or T::WyStorage). Every access goes
// through this symbol (never through a pointer kept in a struct), so the compiler keeps
// shared-memory instructions (LDS/STS), not generic ones.
extern __shared__ __align__(1024) char gdn_chunk_smem[];
template <class Storage>
CUTE_DEVICE Storage& chunk_smem() {
  return *reinterpret_cast<Storage*>(gdn_chunk_smem);
}

// 2^x; x <= 0 where used, but where an exponent carries log2 of inverse norms (bwd_dhu_local.cuh's
// P, the gradient kernel's [64, 64] epilogues: up to ~+20 for rows of norm ~1e-3)
CUTE_DEVICE float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two fp32 values as one 32-bit pair of 16-bit elements.
template <class Element>
CUTE_DEVICE uint32_t pack2(float x, float y) {
  cutlass::NumericArrayConverter<Element, float, 2> convert;
  cutlass::Array<float, 2> in;
  in[0] = x;
  in[1] = y;
  const cutlass::Array<Element, 2> out = convert(in);
  return reinterpret_cast<uint32_t const&>(out);
}

// The inverse: a 32-bit pair of 16-bit elements as two fp32 values.
template <class Element>
CUTE_DEVICE float2 unpack2(uint32_t pair) {
  cutlass::NumericArrayConverter<float, Element, 2> convert;
  const cutlass::Array<float, 2> out = convert(reinterpret_cast<cutlass::Array<Element, 2> const&>(pair));
  return make_float2(out[0], out[1]);
}

// Shared-memory accesses by address: a swizzled cute tensor computes its addresses as integers,
// after which the compiler no longer knows they are shared and would emit generic LD/ST.
CUTE_DEVICE void st_shared(const void* p, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(cute::cast_smem_ptr_to_uint(p)), "r"(v) : "memory");
}
// 16 bytes by 32-bit shared address (offsets worked out once, as ChunkPieces keeps them), or by
// pointer.
CUTE_DEVICE void st_shared(uint32_t p, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
CUTE_DEVICE void st_shared(const void* p, uint4 v) { st_shared(cute::cast_smem_ptr_to_uint(p), v); }
CUTE_DEVICE uint4 ld_shared_v4(uint32_t p) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(p) : "memory");
  return v;
}
// 16 bytes to global memory in one store (a uint4 assignment may be split into four).
CUTE_DEVICE void st_global_v4(void* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
CUTE_DEVICE uint32_t ld_shared_b32(const void* p) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(cute::cast_smem_ptr_to_uint(p)) : "memory");
  return v;
}
CUTE_DEVICE uint4 ld_shared_v4(const void* p) { return ld_shared_v4(cute::cast_smem_ptr_to_uint(p)); }

// dst(i) = f(i, acc(i)) in 16 bits, two adjacent columns per 32-bit store: an SM90 accumulator
// fragment holds column pairs (i, i + 1), which stay adjacent in the swizzled tile.
template <class Element, class Acc, class Dst, class F>
CUTE_DEVICE void store_pairs(const Acc& acc, Dst&& dst, F&& f) {
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) st_shared(&dst(i), pack2<Element>(f(i, acc(i)), f(i + 1, acc(i + 1))));
}

// The recurrence kernels' named barriers (0 is __syncthreads): each warpgroup's own, then per
// stage "full" (loader, or the w / u warpgroup, -> state) and "empty" (state -> loader), 256
// threads each; bwd_dhu's "dh free" (loader -> state: a dh buffer has been written out and may be
// refilled); with the w / u warpgroup, per stage "landed" (loader -> w / u) and its own; the
// training forward's "kept free".
struct ChunkBarriers {
  static constexpr int kLoad = 1, kState = 2, kFull = 3, kEmpty = 6, kDhFree = 9, kLanded = 10, kWu = 13;
  // kOutputAndStates: the loader has written chunk j's kept tiles (sm.vnew[j % 2], sm.h) out (loader ->
  // state, 256 threads), so the state may overwrite sm.h in chunk j + 1.
  static constexpr int kKeptFree = 14;
  static __device__ void sync(int id, int threads) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory"); }
  static __device__ void arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory"); }
  // bar.sync is the aligned form: every thread that blocks in one round of a barrier must run the
  // same static instruction. Where two groups block on one round from different code (bwd_dhu's
  // "empty", waited for by both halves of its loader), the unaligned form is the legal one.
  static __device__ void sync_unaligned(int id, int threads) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
  }
};

}  // namespace attnkit::cuda::gdn
