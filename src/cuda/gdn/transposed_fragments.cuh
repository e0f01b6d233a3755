// src/cuda/gdn/transposed_fragments.cuh — a warpgroup's 16-bit accumulator-shaped fragment of X
// [64, N] moved to or from a shared tile that holds X^T row-major (N rows of 64 contiguous
// elements), with ldmatrix / stmatrix .trans: each 8 x 8 block crosses in one piece.
//
// The recurrence kernel keeps H^T, v_new^T and O^T in registers (chunk_fwd_state.cuh), while
// shared memory and the outputs keep H, u, v_new and O row-major; these are its transposes.
//
// Register pair p of a thread (its accumulator registers 2p, 2p + 1: two adjacent columns) is
// (row half p % 2, column group p / 2) — an SM90 accumulator register i is (column pair i % 2, row
// half i / 2 % 2, column group i / 4). Instruction u moves pairs 4u .. 4u + 3; its matrix k is row
// half k % 2 of column group 2u + k / 2, and lane l supplies the address of that matrix's row
// l % 8 (matrix l / 8): in X^T, row (column of X) 8 (2u + k / 2) + l % 8, 8 elements from X's row
// 16 warp + 8 (k % 2). With .trans a thread's register then holds X(row, col), X(row, col + 1)
// exactly as the accumulator does.
#pragma once
#include <cute/tensor.hpp>

namespace attnkit::cuda::gdn {

// sX views X^T's bytes as [64, N] (the tile's MN-major view): &sX(r, c) is where X(r, c) lives.
// The tile is one 128-byte swizzle atom wide (64 16-bit elements): 16 of X^T's rows further on,
// the swizzle pattern repeats, so instruction u's addresses are instruction 0's plus u * 2 KB and
// a thread keeps one address per tile.
template <class TileX>
CUTE_DEVICE uint32_t transposed_block_address(TileX& sX) {
  static_assert(cute::is_static<typename TileX::layout_type>::value, "a swizzled shared tile");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4, k = lane / 8;
  return cute::cast_smem_ptr_to_uint(&sX(warp * 16 + (k % 2) * 8, 8 * (k / 2) + lane % 8));
}
constexpr uint32_t kTransposedStep = 16 * 128;  // bytes between instruction u and u + 1

// A 16-bit register tensor's storage (an accumulator converted in place, or an A operand
// re-viewed from one) as the 32-bit pairs these moves take.
template <int kPairs, class Tensor16>
CUTE_DEVICE const uint32_t (&as_pairs(const Tensor16& t))[kPairs] {
  return *reinterpret_cast<const uint32_t(*)[kPairs]>(t.data());
}

template <int kPairs, class TileX>
CUTE_DEVICE void store_transposed(const uint32_t (&pairs)[kPairs], TileX& sX) {
  static_assert(kPairs % 4 == 0, "whole stmatrix.x4 instructions");
  const uint32_t addr = transposed_block_address(sX);
  CUTE_UNROLL
  for (int u = 0; u < kPairs / 4; ++u)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr + u * kTransposedStep),
                 "r"(pairs[4 * u]), "r"(pairs[4 * u + 1]), "r"(pairs[4 * u + 2]), "r"(pairs[4 * u + 3])
                 : "memory");
}

template <int kPairs, class TileX>
CUTE_DEVICE void load_transposed(uint32_t (&pairs)[kPairs], TileX& sX) {
  static_assert(kPairs % 4 == 0, "whole ldmatrix.x4 instructions");
  const uint32_t addr = transposed_block_address(sX);
  CUTE_UNROLL
  for (int u = 0; u < kPairs / 4; ++u)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(pairs[4 * u]), "=r"(pairs[4 * u + 1]), "=r"(pairs[4 * u + 2]), "=r"(pairs[4 * u + 3])
                 : "r"(addr + u * kTransposedStep)
                 : "memory");
}

}  // namespace attnkit::cuda::gdn
