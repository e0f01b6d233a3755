// attnkit/semantics/flex_mods.hpp — the built-in flex score_mod / mask_mod catalog as functors
// usable on the host and in device code (spec/attention.md, Flex).
//
// Functor contract (also for your own mods):
//   score mod:  template <class T> T operator()(T score, int64_t b, int64_t h, int64_t q, int64_t kv,
//                                               T* dscore) const;
//               returns the modified score and writes d(modified)/d(score) to *dscore.
//   mask mod:   bool operator()(int64_t b, int64_t h, int64_t q, int64_t kv) const;
// Pointers inside a functor must address memory of the device the op runs on.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include "attnkit/config.hpp"

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

// rel_bias, then ALiBi, then tanh softcap — each part off while its pointer / value is unset.
struct CatalogScoreMod {
  const float* rel_bias = nullptr;  // [H|1, 2*Sk-1]: bias of distance q - kv at index q - kv + Sk - 1
  int64_t rel_bias_head_stride = 0;  // 0 when broadcast over heads
  int64_t rel_bias_stride = 1;
  int64_t sk = 0;
  const float* alibi_slopes = nullptr;  // [H]
  int64_t alibi_stride = 1;
  float softcap = 0.f;

  template <class T>
  ATTNKIT_HD T operator()(T s, int64_t, int64_t h, int64_t q, int64_t kv, T* ds) const {
    if (rel_bias) s += static_cast<T>(rel_bias[h * rel_bias_head_stride + (q - kv + sk - 1) * rel_bias_stride]);
    if (alibi_slopes) s += static_cast<T>(alibi_slopes[h * alibi_stride]) * static_cast<T>(kv - q);
    *ds = T(1);
    if (softcap > 0.f) {
      const T c = static_cast<T>(softcap);
      const T t = std::tanh(s / c);
      *ds = T(1) - t * t;
      s = c * t;
    }
    return s;
  }
};

// causal (with an optional prefix-LM prefix), sliding window, document ids — and-ed together.
struct CatalogMaskMod {
  bool causal = false;
  const int32_t* prefix_lengths = nullptr;  // [B]: with causal, kv < prefix[b] is visible too
  int64_t prefix_stride = 1;
  int64_t window = -1;                      // >= 0: visible only when q - kv <= window
  const int32_t* doc_q = nullptr;           // [B, Sq] document id of each query
  const int32_t* doc_kv = nullptr;          // [B, Sk] document id of each key
  int64_t doc_q_strides[2] = {0, 1};
  int64_t doc_kv_strides[2] = {0, 1};

  ATTNKIT_HD bool operator()(int64_t b, int64_t, int64_t q, int64_t kv) const {
    if (causal && kv > q && !(prefix_lengths && kv < prefix_lengths[b * prefix_stride])) return false;
    if (window >= 0 && q - kv > window) return false;
    if (doc_q && doc_q[b * doc_q_strides[0] + q * doc_q_strides[1]] != doc_kv[b * doc_kv_strides[0] + kv * doc_kv_strides[1]])
      return false;
    return true;
  }
};

}  // namespace attnkit
