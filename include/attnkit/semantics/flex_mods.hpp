// attnkit/semantics/flex_mods.hpp — the built-in flex score_mod / mask_mod catalog as functors
// usable on the host and in device code (spec/attention.md, Flex).
//
// Functor contract (also for your own mods):
//   score mod:  template <class T> T operator()(T score, int64_t b, int64_t h, int64_t q, int64_t kv,
//                                               T* dscore) const;
//               returns the modified score and writes d(modified)/d(score) to *dscore.
//   mask mod:   bool operator()(int64_t b, int64_t h, int64_t q, int64_t kv) const;
// Pointers inside a functor must address memory of the device the op runs on.
//
// Positions are below 2^31 on every backend (the GPU kernels take sequences below 2^30; a CPU
// tensor with 2^31 positions would not fit in memory), so ALiBi takes its distance in 32 bits:
// per element in the GPU kernels, a 64-bit integer-to-float conversion is a slow instruction.
// (The 64-bit compares of the masks cost one extra instruction each; narrowing them too moved
// the forward kernel's register allocation into spills.)
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include "attnkit/config.hpp"
#include "attnkit/semantics/numerics.hpp"  // softcap_tanh

namespace attnkit {

struct IdentityScoreMod {
  template <class T>
  ATTNKIT_HD T operator()(T s, int64_t, int64_t, int64_t, int64_t, T* ds) const {
    *ds = T(1);
    return s;
  }
};

// Every key visible. Kernels recognise this type and treat every visited block as full.
struct NoMaskMod {
  ATTNKIT_HD bool operator()(int64_t, int64_t, int64_t, int64_t) const { return true; }
};
template <class M>
inline constexpr bool is_no_mask_v = std::is_same_v<M, NoMaskMod>;

// The catalog's score mods, each a functor of its own.
struct RelBiasScoreMod {
  const float* table = nullptr;  // [H|1, 2*Sk-1]: bias of distance q - kv at index q - kv + Sk - 1
  int64_t head_stride = 0;       // 0 when broadcast over heads
  int64_t stride = 1;
  int64_t sk = 0;
  template <class T>
  ATTNKIT_HD T operator()(T s, int64_t, int64_t h, int64_t q, int64_t kv, T* ds) const {
    *ds = T(1);
    return s + static_cast<T>(table[h * head_stride + (q - kv + sk - 1) * stride]);
  }
};

struct AlibiScoreMod {
  const float* slopes = nullptr;  // [H]
  int64_t stride = 1;
  template <class T>
  ATTNKIT_HD T operator()(T s, int64_t, int64_t h, int64_t q, int64_t kv, T* ds) const {
    *ds = T(1);
    return s + static_cast<T>(slopes[h * stride]) * static_cast<T>(static_cast<int32_t>(kv - q));
  }
};

struct SoftcapScoreMod {
  float cap = 0.f;      // > 0
  float inv_cap = 0.f;  // 1 / cap: a float division per element is a MUFU op plus a fix-up path
  SoftcapScoreMod() = default;
  ATTNKIT_HD explicit SoftcapScoreMod(float c) : cap(c), inv_cap(c > 0.f ? 1.f / c : 0.f) {}
  template <class T>
  ATTNKIT_HD T operator()(T s, int64_t, int64_t, int64_t, int64_t, T* ds) const {
    const T c = static_cast<T>(cap);
    T t;
    if constexpr (std::is_same_v<T, float>) t = softcap_tanh(s * inv_cap);
    else t = std::tanh(s / c);  // float64 (the CPU reference) divides
    *ds = T(1) - t * t;
    return c * t;
  }
};

// rel_bias, then ALiBi, then tanh softcap — each part off while its table / value is unset.
// Kernels call for_each_part and apply each enabled part to a whole tile in turn (one small loop
// per part instead of every part's code inlined per element); operator() is the composition.
struct CatalogScoreMod {
  RelBiasScoreMod rel_bias;
  AlibiScoreMod alibi;
  SoftcapScoreMod softcap;

  template <class F>
  ATTNKIT_HD void for_each_part(F&& f) const {
    if (rel_bias.table) f(rel_bias);
    if (alibi.slopes) f(alibi);
    if (softcap.cap > 0.f) f(softcap);
  }
  // d(modified)/d(score) from the modified score alone: rel_bias and ALiBi add a constant, and
  // softcap, the last part, is y = c tanh(s / c) with derivative 1 - (y / c)^2. The GPU backward
  // applies the parts one pass each (as the forward) and so needs no derivative per element.
  template <class T>
  ATTNKIT_HD T derivative_from_output(T y) const {
    const T t = y * static_cast<T>(softcap.inv_cap);  // without softcap inv_cap is 0: derivative 1
    return T(1) - t * t;
  }
  template <class T>
  ATTNKIT_HD T operator()(T s, int64_t b, int64_t h, int64_t q, int64_t kv, T* ds) const {
    T d = T(1);
    for_each_part([&](const auto& part) {
      T dp;
      s = part(s, b, h, q, kv, &dp);
      d *= dp;
    });
    *ds = d;
    return s;
  }
};

// The catalog's mask mods, each a functor of its own.
struct CausalMaskMod {
  ATTNKIT_HD bool operator()(int64_t, int64_t, int64_t q, int64_t kv) const { return kv <= q; }
};

// Causal, and the first prefix[b] keys visible to every query (prefix-LM).
struct PrefixLmMaskMod {
  const int32_t* prefix_lengths = nullptr;  // [B]
  int64_t stride = 1;
  ATTNKIT_HD bool operator()(int64_t b, int64_t, int64_t q, int64_t kv) const {
    // Loaded whether or not kv <= q: a load guarded by the || would be issued per element (it
    // cannot be hoisted past the guard), 64 predicated loads per tile in the GPU kernel.
    const int64_t prefix = prefix_lengths[b * stride];
    return kv <= q || kv < prefix;
  }
};

struct SlidingWindowMaskMod {
  int64_t window = -1;  // visible when q - kv <= window
  ATTNKIT_HD bool operator()(int64_t, int64_t, int64_t q, int64_t kv) const { return q - kv <= window; }
};

struct DocumentMaskMod {
  const int32_t* doc_q = nullptr;   // [B, Sq] document id of each query
  const int32_t* doc_kv = nullptr;  // [B, Sk] document id of each key
  int64_t q_strides[2] = {0, 1};
  int64_t kv_strides[2] = {0, 1};
  ATTNKIT_HD int32_t query_doc(int64_t b, int64_t q) const { return doc_q[b * q_strides[0] + q * q_strides[1]]; }
  ATTNKIT_HD int32_t key_doc(int64_t b, int64_t kv) const { return doc_kv[b * kv_strides[0] + kv * kv_strides[1]]; }
  ATTNKIT_HD bool operator()(int64_t b, int64_t, int64_t q, int64_t kv) const { return query_doc(b, q) == key_doc(b, kv); }
};

// The parts that depend on q - kv alone, as the band lo <= q - kv <= hi they keep: kernels test
// them with one 32-bit compare per score, and whole boxes of scores from their corners.
struct DiagonalBand {
  int64_t lo, hi;
};
ATTNKIT_HD DiagonalBand diagonal_band(const CausalMaskMod&) { return {0, INT64_MAX}; }
ATTNKIT_HD DiagonalBand diagonal_band(const SlidingWindowMaskMod& m) { return {INT64_MIN, m.window}; }
template <class MaskPart>
inline constexpr bool is_diagonal_band_v =
    std::is_same_v<MaskPart, CausalMaskMod> || std::is_same_v<MaskPart, SlidingWindowMaskMod>;

// Whether a mask part holds for every query of [q_lo, q_hi] and every key of [kv_lo, kv_hi]:
// decided from the box's corners for the band parts (and prefix-LM through its causal half), else
// false (the part is then evaluated per element). Lets a kernel skip a part's pass over a tile it
// cannot mask.
template <class MaskPart>
ATTNKIT_HD bool holds_on_box(const MaskPart& m, int64_t q_lo, int64_t q_hi, int64_t kv_lo, int64_t kv_hi) {
  if constexpr (is_diagonal_band_v<MaskPart>) {
    const DiagonalBand band = diagonal_band(m);
    return q_lo - kv_hi >= band.lo && q_hi - kv_lo <= band.hi;
  } else if constexpr (std::is_same_v<MaskPart, PrefixLmMaskMod>) {
    return holds_on_box(CausalMaskMod{}, q_lo, q_hi, kv_lo, kv_hi);
  } else {
    return false;
  }
}

// causal (with an optional prefix-LM prefix), sliding window, document ids — and-ed together.
// As with CatalogScoreMod, kernels apply the enabled parts one pass each (for_each_part).
struct CatalogMaskMod {
  bool causal = false;
  PrefixLmMaskMod prefix;  // with causal and prefix.prefix_lengths set: causal or inside the prefix
  SlidingWindowMaskMod window;  // on while window.window >= 0
  DocumentMaskMod document;     // on while document.doc_q is set

  template <class F>
  ATTNKIT_HD void for_each_part(F&& f) const {
    if (causal) {
      if (prefix.prefix_lengths) f(prefix);
      else f(CausalMaskMod{});
    }
    if (window.window >= 0) f(window);
    if (document.doc_q) f(document);
  }
  ATTNKIT_HD bool operator()(int64_t b, int64_t h, int64_t q, int64_t kv) const {
    bool visible = true;
    for_each_part([&](const auto& part) { visible = visible && part(b, h, q, kv); });
    return visible;
  }
};

}  // namespace attnkit
