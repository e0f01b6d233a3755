// tests/cpp/gdn_chunk_layout_test.cu — the chunked forward reads several shared-memory tiles both
// as [rows, cols] K-major and as [cols, rows] MN-major operands over the same bytes
// (chunk_fwd_traits.cuh). Host-only: checks every element maps to the same offset in both views,
// that 8 consecutive columns stay contiguous (the 16-byte cp.async pieces), and that a swizzled
// offset is the same in every 1024-byte aligned tile (the kernels reuse them across buffers), and
// what the transposed fragment moves (transposed_fragments.cuh) assume of the MN-major views.
#include <gtest/gtest.h>

#include "src/cuda/gdn/bwd_dhu_traits.cuh"
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
