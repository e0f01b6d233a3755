// src/cuda/gdn/chunk_fwd_rows.cuh — moving one chunk's rows into shared memory, and the in-op
// l2norm of rows in place; shared by the two chunked-forward kernels.
#pragma once
#include <cute/tensor.hpp>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn {

// 16 bytes from global to shared memory: cp.async (zero-filled when !valid), or element by
// element when the rows are not 16-byte aligned.
template <class Element>
CUTE_DEVICE void copy16(Element* dst, const Element* src, bool valid, bool vec16) {
  if (vec16) {
    const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
  } else {
    cutlass::Array<Element, 8> piece;
#pragma unroll
    for (int e = 0; e < 8; ++e) piece[e] = valid ? src[e] : Element(0.f);
    st_shared(dst, reinterpret_cast<const uint4&>(piece));
  }
}
CUTE_DEVICE void copy4_async(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
CUTE_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
CUTE_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Rows t0 .. t0 + 63 of one head of x (columns col0 .. col0 + kCols - 1) into the swizzled tile
// dst [64, kCols], by the 128 threads of a warpgroup: thread tid copies the 16-byte piece
// tid % (kCols / 8) of rows tid / (kCols / 8) + i * step. Rows at or past `valid` are zero-filled
// (and read nothing, though they still pass a valid address: the chunk's first row).
template <int kCols, class Element, class Dst>
CUTE_DEVICE void copy_chunk_rows(Dst&& dst, const Element* base, const RowTensor& x, const WorkItem& it, int64_t t0,
                                 int head, int valid, bool vec16, int tid) {
  constexpr int kUnits = kCols / 8, kStep = 128 / kUnits;
  const int c = (tid % kUnits) * 8, r = tid / kUnits;
  const Element* first = base + it.row(x, t0, head) + c;
  const int64_t step = int64_t(kStep) * x.st;
  const Element* src = first + int64_t(r) * x.st;
#pragma unroll
  for (int i = 0; i < 64 / kStep; ++i, src += step) {
    const bool ok = r + i * kStep < valid;
    copy16(&dst(r + i * kStep, c), ok ? src : first, ok, vec16);
  }
}

// Row `row` of the swizzled tile s [*, kCols] <- row / sqrt(sum row^2 + eps), in place, by one
// thread. Both kernels normalise K this same way, so they see bit-identical rows.
template <int kCols, class Tile>
CUTE_DEVICE void l2norm_row(Tile&& s, int row) {
  using Element = typename std::decay_t<decltype(s(0, 0))>;
  using Piece = cutlass::Array<Element, 8>;  // 16 bytes, contiguous in the swizzled tile
  Piece x[kCols / 8];
  float ss[4] = {0.f, 0.f, 0.f, 0.f};  // independent partial sums: no serial FMA chain
#pragma unroll
  for (int c = 0; c < kCols / 8; ++c) {
    const uint4 raw = ld_shared_v4(&s(row, 8 * c));
    x[c] = reinterpret_cast<const Piece&>(raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) ss[e % 4] = fmaf(float(x[c][e]), float(x[c][e]), ss[e % 4]);
  }
  const float inv = rsqrtf((ss[0] + ss[1]) + (ss[2] + ss[3]) + static_cast<float>(kL2NormEps));
#pragma unroll
  for (int c = 0; c < kCols / 8; ++c) {
#pragma unroll
    for (int e = 0; e < 8; ++e) x[c][e] = Element(float(x[c][e]) * inv);
    st_shared(&s(row, 8 * c), reinterpret_cast<const uint4&>(x[c]));
  }
}

}  // namespace attnkit::cuda::gdn
