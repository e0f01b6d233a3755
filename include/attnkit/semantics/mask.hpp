// attnkit/semantics/mask.hpp — which keys a query sees (spec/attention.md "Score and mask").
// The one definition used by the CPU reference and by the CUDA kernels.
#pragma once
#include <cstdint>
#include "attnkit/config.hpp"

namespace attnkit {

enum class CausalAlign : uint8_t {
  kBottomRight,  // flash_attn's default: query i sits on key diagonal i + (Sk - Sq)
  kTopLeft,      // torch SDPA is_causal: query i sits on key diagonal i
};

// Runtime mask options of the softmax attention op. -1 means "unbounded" for a window side.
struct MaskOptions {
  bool causal = false;
  CausalAlign align = CausalAlign::kBottomRight;
  int64_t window_left = -1;
  int64_t window_right = -1;
};

// The mask of one (query sequence, key sequence) pair, resolved to integer bounds:
// key j is visible to query i iff lo(i) <= j <= hi(i) and 0 <= j < sk.
// Index is int64_t on the host; kernels use int32_t (sequence lengths fit, registers are scarce).
template <class Index>
struct MaskRuleT {
  Index sk = 0;
  Index diag_offset = 0;  // diagonal of query i is i + diag_offset
  Index left = -1;        // -1: unbounded
  Index right = -1;       // -1: unbounded; causal clamps it to 0

  ATTNKIT_HD static MaskRuleT make(const MaskOptions& m, Index sq, Index sk) {
    MaskRuleT r;
    r.sk = sk;
    r.diag_offset = m.align == CausalAlign::kBottomRight ? sk - sq : 0;
    r.left = static_cast<Index>(m.window_left);
    r.right = static_cast<Index>(m.window_right);
    if (m.causal) r.right = 0;  // causal is the window (left, 0); a wider right side cannot widen it
    return r;
  }
  // First visible key of query i (may exceed hi: the row is then empty).
  ATTNKIT_HD Index lo(Index i) const {
    if (left < 0) return 0;
    Index v = i + diag_offset - left;
    return v < 0 ? 0 : v;
  }
  // Last visible key of query i (may be < 0 or < lo: the row is then empty).
  ATTNKIT_HD Index hi(Index i) const {
    if (right < 0) return sk - 1;
    Index v = i + diag_offset + right;
    return v > sk - 1 ? sk - 1 : v;
  }
  ATTNKIT_HD bool visible(Index i, Index j) const { return j >= lo(i) && j <= hi(i) && j >= 0 && j < sk; }
};
using MaskRule = MaskRuleT<int64_t>;

}  // namespace attnkit
