// tests/cpp/attention_case.hpp — one softmax attention test case of the GPU suites (forward and
// backward): shapes, mask, softcap, dtype, layout, varlen lengths, and a readable name.
#pragma once
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "test_util.hpp"

namespace attnkit::test {

struct Case {
  int64_t B = 1, Sq = 128, Sk = 128, Hq = 2, Hkv = 2, D = 128;
  MaskOptions mask;
  double softcap = 0;
  std::optional<double> scale;      // unset: 1/sqrt(D)
  DType dt = DType::kBFloat16;
  bool strided = false;             // BHSD memory seen as BSHD
  std::vector<int64_t> lq, lk;      // varlen lengths (B = lq.size())
  bool odd_unit_strides = false;    // the GPU run's size-1 dims carry strides of 3 elements (never stepped)
  bool broadcast_kv = false;        // one batch of K and V, seen by every batch through a batch stride of 0
  double key_growth = 0;            // > 0: keys in groups of 64 scaled by 1, 1 + g, 1 + 2g, 1 + 3g in turn (not varlen)
  std::string name() const {
    return "B" + std::to_string(B) + " Sq" + std::to_string(Sq) + " Sk" + std::to_string(Sk) + " Hq" + std::to_string(Hq) +
           " Hkv" + std::to_string(Hkv) + " D" + std::to_string(D) + (mask.causal ? " causal" : "") +
           (mask.align == CausalAlign::kTopLeft ? "-topleft" : "") + " win(" + std::to_string(mask.window_left) + "," +
           std::to_string(mask.window_right) + ")" + (softcap > 0 ? " softcap" : "") +
           (scale ? " scale" + std::to_string(*scale) : "") + (dt == DType::kFloat16 ? " fp16" : " bf16") +
           (strided ? " strided" : "") + (lq.empty() ? "" : " varlen") + (odd_unit_strides ? " odd-unit-strides" : "") +
           (broadcast_kv ? " broadcast-kv" : "") + (key_growth > 0 ? " key-growth" : "");
  }
};

// K or V [B, S, H, D] (float64, contiguous) with every batch a copy of batch 0, so that a view of
// batch 0 with batch stride 0 (torch's expand) holds the same values.
inline void copy_batch0_everywhere(HostTensor& t) {
  const size_t chunk = t.buf.size() / static_cast<size_t>(t.view.sizes[0]);
  for (int64_t b = 1; b < t.view.sizes[0]; ++b) std::copy_n(t.buf.begin(), chunk, t.buf.begin() + b * chunk);
}

// MQA / single-head shapes with B = 1 whose size-1 dims carry odd strides, and K / V broadcast over
// the batch (stride 0): views torch produces that the TMA descriptors must still describe.
inline std::vector<Case> unusual_stride_cases() {
  std::vector<Case> cases;
  for (auto [hq, hkv] : {std::pair{1, 1}, std::pair{4, 1}})
    for (int64_t D : {64, 128, 256}) {
      Case c;
      c.D = D;
      c.Hq = hq;
      c.Hkv = hkv;
      c.Sq = c.Sk = 200;
      c.mask.causal = hq == 4;
      c.odd_unit_strides = true;
      cases.push_back(c);
    }
  Case b;
  b.B = 3;
  b.Hq = 4;
  b.Hkv = 2;
  b.Sq = 150;
  b.Sk = 260;
  b.broadcast_kv = true;
  cases.push_back(b);
  return cases;
}

// Empty dims the caller may pass: no keys (every row empty: O = 0, LSE = -inf, zero gradients),
// no queries, no batch.
inline std::vector<Case> empty_dim_cases() {
  std::vector<Case> cases;
  for (auto [b, sq, sk] : {std::tuple{2, 70, 0}, std::tuple{2, 0, 70}, std::tuple{0, 70, 70}})
    for (int64_t D : {64, 128, 256}) {
      Case c;
      c.B = b;
      c.Sq = sq;
      c.Sk = sk;
      c.D = D;
      c.Hq = 4;
      c.Hkv = 2;
      cases.push_back(c);
    }
  return cases;
}

// The case lists the forward and backward suites share.
// Every head dim x awkward lengths (1, 17, 63/65, 127/1000, a multiple of the tiles).
// Scales <= 0, which the spec allows: the kernels keep unscaled scores and fold a positive scale
// into the exponent; with -3 a row's scaled scores span more than 2^7 in exp2's units (an overflow
// wherever the running max were taken of the unscaled scores), 0 gives uniform attention over the
// visible keys. Each head dim, with causal / window masks and a softcap.
inline std::vector<Case> nonpositive_scale_cases() {
  std::vector<Case> cases;
  for (int64_t D : {64, 128, 256}) {
    Case c;
    c.D = D;
    c.Sq = 200;
    c.Sk = 333;
    c.Hq = 4;
    c.scale = -3.0;
    c.mask.causal = true;
    cases.push_back(c);
    c.mask = MaskOptions{};
    c.mask.window_left = 40;
    c.mask.window_right = 10;
    c.scale = -1.0 / std::sqrt(static_cast<double>(D));
    cases.push_back(c);
    c.mask = MaskOptions{};
    c.mask.causal = true;
    c.scale = 0.0;
    cases.push_back(c);
    c.scale = -0.5;
    c.softcap = 5;
    cases.push_back(c);
  }
  return cases;
}

inline std::vector<Case> head_dim_and_length_cases() {
  std::vector<Case> cases;
  for (int64_t D : {64, 128, 256})
    for (auto [sq, sk] : {std::pair{1, 1}, std::pair{17, 17}, std::pair{63, 65}, std::pair{65, 63}, std::pair{127, 1000},
                          std::pair{1000, 127}, std::pair{256, 256}}) {
      Case c;
      c.D = D;
      c.Sq = sq;
      c.Sk = sk;
      cases.push_back(c);
    }
  return cases;
}

// Every head dim x causal both alignments, a two-sided window, causal + window + softcap, and
// more queries than keys under causal (rows with no visible key).
inline std::vector<Case> mask_cases() {
  std::vector<Case> cases;
  for (int64_t D : {64, 128, 256})
    for (int variant = 0; variant < 5; ++variant) {
      Case c;
      c.D = D;
      c.B = 2;
      c.Sq = 300;
      c.Sk = 500;
      if (variant == 0) c.mask.causal = true;
      if (variant == 1) { c.mask.causal = true; c.mask.align = CausalAlign::kTopLeft; }
      if (variant == 2) { c.mask.window_left = 100; c.mask.window_right = 30; }
      if (variant == 3) { c.mask.causal = true; c.mask.window_left = 64; c.softcap = 20.0; }
      if (variant == 4) { c.Sq = 500; c.Sk = 300; c.mask.causal = true; }
      cases.push_back(c);
    }
  return cases;
}

}  // namespace attnkit::test
