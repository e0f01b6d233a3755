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
struct MaskRule {
  int64_t sk = 0;
  int64_t diag_offset = 0;  // diagonal of query i is i + diag_offset
  int64_t left = -1;        // -1: unbounded
  int64_t right = -1;       // -1: unbounded; causal clamps it to 0

  ATTNKIT_HD static MaskRule make(const MaskOptions& m, int64_t sq, int64_t sk) {
    MaskRule r;
    r.sk = sk;
    r.diag_offset = m.align == CausalAlign::kBottomRight ? sk - sq : 0;
    r.left = m.window_left;
    r.right = m.window_right;
    if (m.causal) r.right = 0;  // causal is the window (left, 0); a wider right side cannot widen it
    return r;
  }
  // First visible key of query i (may exceed hi: the row is then empty).
  ATTNKIT_HD int64_t lo(int64_t i) const {
    if (left < 0) return 0;
    int64_t v = i + diag_offset - left;
    return v < 0 ? 0 : v;
  }
  // Last visible key of query i (may be < 0 or < lo: the row is then empty).
  ATTNKIT_HD int64_t hi(int64_t i) const {
    if (right < 0) return sk - 1;
    int64_t v = i + diag_offset + right;
    return v > sk - 1 ? sk - 1 : v;
  }
  ATTNKIT_HD bool visible(int64_t i, int64_t j) const { return j >= lo(i) && j <= hi(i) && j >= 0 && j < sk; }
};

}  // namespace attnkit
