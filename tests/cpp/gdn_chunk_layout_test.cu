// tests/cpp/gdn_chunk_layout_test.cu — the chunked forward reads several shared-memory tiles both
// as [rows, cols] K-major and as [cols, rows] MN-major operands over the same bytes
// (chunk_fwd_traits.cuh). Host-only: checks every element maps to the same offset in both views,
// and that 8 consecutive columns stay contiguous (the 16-byte cp.async pieces).
#include <gtest/gtest.h>

#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::test {
namespace {

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

template <class Element, int kDK>
void check_traits() {
  using T = cuda::gdn::ChunkFwdTraits<Element, kDK>;
  expect_same_bytes<typename T::LayoutRowsDK, typename T::LayoutRowsDKt, T::kC, kDK>();
  expect_same_bytes<typename T::LayoutRowsBV, typename T::LayoutRowsBVt, T::kC, T::kBV>();
  expect_same_bytes<typename T::LayoutH, typename T::LayoutHt, kDK, T::kBV>();
}

TEST(GdnChunkLayouts, RowMajorAndTransposedViewsAgree) {
  check_traits<cutlass::bfloat16_t, 64>();
  check_traits<cutlass::bfloat16_t, 128>();
  check_traits<cutlass::half_t, 128>();
}

}  // namespace
}  // namespace attnkit::test
