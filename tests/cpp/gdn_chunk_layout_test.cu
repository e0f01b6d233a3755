// tests/cpp/gdn_chunk_layout_test.cu — the chunked forward reads several shared-memory tiles both
// as [rows, cols] K-major and as [cols, rows] MN-major operands over the same bytes
// (chunk_fwd_traits.cuh). Host-only: checks every element maps to the same offset in both views,
// that 8 consecutive columns stay contiguous (the 16-byte cp.async pieces), and that a swizzled
// offset is the same in every 1024-byte aligned tile (the kernels reuse them across buffers), and
// what the transposed fragment moves (transposed_fragments.cuh) assume of the MN-major views; and
// that the backward's tiles (chunk_bwd_tiles.cuh) address and partition as cute does.
#include <gtest/gtest.h>

#include "src/cuda/gdn/bwd_dhu_traits.cuh"
#include "src/cuda/gdn/chunk_bwd_tiles.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"
#include "src/cuda/gdn/transposed_fragments.cuh"

namespace attnkit::test {
namespace {

using namespace cute;

template <class Rows, class Cols, int kRows, int kCols>
void expect_same_bytes() {
  Rows rows;
  Cols cols;
  int mismatches = 0, split_pieces = 0;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      if (rows(r, c) != cols(c, r)) ++mismatches;
      if (c % 8 && rows(r, c) != rows(r, c - 1) + 1) ++split_pieces;
    }
  EXPECT_EQ(mismatches, 0) << kRows << " x " << kCols;
  EXPECT_EQ(split_pieces, 0) << kRows << " x " << kCols;
}

// The kernels work out a thread's byte offsets in one 1024-byte aligned tile and reuse them for
// every other tile of the same layout (ChunkPieces): cute applies the swizzle to
// address bits below 1024, so the offsets must be the same in any two such tiles.
template <class Element, class Layout, int kRows, int kCols>
void expect_offsets_same_in_aligned_tiles() {
  alignas(1024) static Element tiles[3][kRows * kCols + 512];  // rows of 1024-byte multiples
  static_assert(sizeof(tiles[0]) % 1024 == 0);
  Tensor a = make_tensor(make_smem_ptr(tiles[0]), Layout{});
  Tensor b = make_tensor(make_smem_ptr(tiles[2]), Layout{});
  int mismatches = 0;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c)
      if (reinterpret_cast<const char*>(&a(r, c)) - reinterpret_cast<const char*>(tiles[0]) !=
          reinterpret_cast<const char*>(&b(r, c)) - reinterpret_cast<const char*>(tiles[2]))
        ++mismatches;
  EXPECT_EQ(mismatches, 0) << kRows << " x " << kCols;
}

// ldmatrix / stmatrix .trans move 8 consecutive rows of an MN-major view [64, kCols] (8 elements
// of one row of the row-major tile) as one 16-byte piece, and instruction u's addresses are
// instruction 0's plus u * kTransposedStep: checked at every address a thread of
// transposed_block_address can form.
template <class Element, class LayoutT, int kCols>
void expect_transposed_blocks() {
  alignas(1024) static Element tile[64 * kCols];
  Tensor t = make_tensor(make_smem_ptr(tile), LayoutT{});
  auto offset = [&](int r, int c) { return reinterpret_cast<const char*>(&t(r, c)) - reinterpret_cast<const char*>(tile); };
  int split = 0, off_step = 0;
  for (int r0 = 0; r0 < 64; r0 += 8)
    for (int c = 0; c < 16; ++c) {
      for (int e = 1; e < 8; ++e)
        if (offset(r0 + e, c) != offset(r0, c) + 2 * e) ++split;
      for (int u = 1; u < kCols / 16; ++u)
        if (offset(r0, c + 16 * u) != offset(r0, c) + u * long(cuda::gdn::kTransposedStep)) ++off_step;
    }
  EXPECT_EQ(split, 0) << "64 x " << kCols;
  EXPECT_EQ(off_step, 0) << "64 x " << kCols;
}

template <class Element, int kDK>
void check_traits() {
  using T = cuda::gdn::ChunkFwdTraits<Element, kDK>;
  expect_same_bytes<typename T::LayoutRowsDK, typename T::LayoutRowsDKt, T::kC, kDK>();
  expect_same_bytes<typename T::LayoutRowsBV, typename T::LayoutRowsBVt, T::kC, T::kBV>();
  expect_same_bytes<typename T::LayoutH, typename T::LayoutHt, kDK, T::kBV>();
  expect_same_bytes<typename T::LayoutCC, typename T::LayoutCCt, T::kC, T::kC>();
  expect_transposed_blocks<Element, typename T::LayoutRowsBVt, T::kC>();  // u^T, O^T, v_new^T
  expect_transposed_blocks<Element, typename T::LayoutHt, kDK>();         // H^T
  expect_offsets_same_in_aligned_tiles<Element, typename T::LayoutRowsDK, T::kC, kDK>();
  expect_offsets_same_in_aligned_tiles<Element, typename T::LayoutRowsBV, T::kC, T::kBV>();
  expect_offsets_same_in_aligned_tiles<Element, typename T::LayoutH, kDK, T::kBV>();
}

// bwd_dhu's tiles (bwd_dhu_traits.cuh), at both value blocks.
template <class Element, int kDK, int kBV>
void check_dhu_traits() {
  using T = cuda::gdn::BwdDhuTraits<Element, kDK, kBV>;
  expect_same_bytes<typename T::LayoutRowsDK, typename T::LayoutRowsDKt, T::kC, kDK>();
  expect_same_bytes<typename T::LayoutRowsBV, typename T::LayoutRowsBVt, T::kC, kBV>();
  expect_same_bytes<typename T::LayoutDh, typename T::LayoutDht, kDK, kBV>();
  expect_offsets_same_in_aligned_tiles<Element, typename T::LayoutRowsDK, T::kC, kDK>();
  expect_offsets_same_in_aligned_tiles<Element, typename T::LayoutRowsBV, T::kC, kBV>();
  expect_offsets_same_in_aligned_tiles<Element, typename T::LayoutDh, kDK, kBV>();  // the two dh buffers
}

// The chunked backward's tiles: the kernels address elements with Tile::offset / frag_offset
// and read accumulators by acc_row / acc_col; cute builds the WGMMA descriptors and fragments.
// Both must name the same bytes and the same (row, column) of every element.
template <class Element, int kRows, int kCols>
void check_bwd_tile() {
  using Tile = cuda::gdn::tiles::Tile<Element, kRows, kCols>;
  alignas(1024) static Element tile[kRows * kCols];
  Tensor k_major = make_tensor(make_smem_ptr(tile), typename Tile::KMajor{});
  Tensor mn_major = make_tensor(make_smem_ptr(tile), typename Tile::MnMajor{});
  auto offset = [&](const Element* p) { return long(reinterpret_cast<const char*>(p) - reinterpret_cast<const char*>(tile)); };
  int k_wrong = 0, mn_wrong = 0;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      if (offset(&k_major(r, c)) != long(Tile::offset(r, c))) ++k_wrong;
      if (offset(&mn_major(c, r)) != long(Tile::offset(r, c))) ++mn_wrong;
    }
  EXPECT_EQ(k_wrong, 0) << kRows << " x " << kCols;
  EXPECT_EQ(mn_wrong, 0) << kRows << " x " << kCols;
  // The copies step a thread's 16-byte piece by whole atoms of rows (chunk_bwd_kernel.cuh,
  // PieceWalk): 8 m rows on is 8 m * kRowBytes on, and the piece's 8 elements are contiguous.
  int step_wrong = 0, split = 0;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; c += 8) {
      for (int m = 8; r + m < kRows; m += 8)
        if (Tile::offset(r + m, c) != Tile::offset(r, c) + uint32_t(m * Tile::kRowBytes)) ++step_wrong;
      for (int e = 1; e < 8; ++e)
        if (Tile::offset(r, c + e) != Tile::offset(r, c) + 2u * e) ++split;
    }
  EXPECT_EQ(step_wrong, 0) << kRows << " x " << kCols;
  EXPECT_EQ(split, 0) << kRows << " x " << kCols;
  if constexpr (kRows == 64) {  // a [64, kCols] product's accumulator pairs in this tile
    int frag_wrong = 0;
    for (int tid = 0; tid < 256; ++tid)
      for (int i = 0; i < 64 * kCols / 256; i += 2) {
        const int r = cuda::gdn::tiles::acc_row(tid, i), c = cuda::gdn::tiles::acc_col<kCols>(tid, i);
        if (Tile::frag_offset(tid, i) != Tile::offset(r, c)) ++frag_wrong;
      }
    EXPECT_EQ(frag_wrong, 0) << kRows << " x " << kCols;
  }
}

// acc_row / acc_col against cute's partition of the [64, kN] product over two warpgroups.
template <class Element, int kN>
void check_bwd_accumulator() {
  using Mma = cuda::gdn::tiles::WgMma<Element, kN, 64, GMMA::Major::K, GMMA::Major::MN>;
  Mma mma;
  int wrong = 0, count = 0;
  for (int tid = 0; tid < 256; ++tid) {
    Tensor c = mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<_64, Int<kN>>{}));
    ASSERT_EQ(int(size(c)), 64 * kN / 256);
    for (int i = 0; i < size(c); ++i, ++count)
      if (get<0>(c(i)) != cuda::gdn::tiles::acc_row(tid, i) || get<1>(c(i)) != cuda::gdn::tiles::acc_col<kN>(tid, i)) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "[64, " << kN << "]";
  EXPECT_EQ(count, 64 * kN);
}

TEST(GdnChunkLayouts, BackwardTilesAgreeWithCute) {
  check_bwd_tile<cutlass::bfloat16_t, 64, 128>();  // rows, D = 128
  check_bwd_tile<cutlass::bfloat16_t, 128, 128>();  // a state
  check_bwd_tile<cutlass::half_t, 64, 64>();      // rows at D = 64, the squares
  check_bwd_accumulator<cutlass::bfloat16_t, 128>();
  check_bwd_accumulator<cutlass::half_t, 64>();
}

TEST(GdnChunkLayouts, BwdDhuViewsAgree) {
  check_dhu_traits<cutlass::bfloat16_t, 128, 32>();
  check_dhu_traits<cutlass::bfloat16_t, 128, 64>();
  check_dhu_traits<cutlass::half_t, 64, 32>();
}

TEST(GdnChunkLayouts, RowMajorAndTransposedViewsAgree) {
  check_traits<cutlass::bfloat16_t, 64>();
  check_traits<cutlass::bfloat16_t, 128>();
  check_traits<cutlass::half_t, 128>();
}

}  // namespace
}  // namespace attnkit::test
