// tests/cpp/attention_case.hpp — one softmax attention test case of the GPU suites (forward and
// backward): shapes, mask, softcap, dtype, layout, varlen lengths, and a readable name.
#pragma once
#include <string>
#include <vector>

#include "test_util.hpp"

namespace attnkit::test {

struct Case {
  int64_t B = 1, Sq = 128, Sk = 128, Hq = 2, Hkv = 2, D = 128;
  MaskOptions mask;
  double softcap = 0;
  DType dt = DType::kBFloat16;
  bool strided = false;             // BHSD memory seen as BSHD
  std::vector<int64_t> lq, lk;      // varlen lengths (B = lq.size())
  std::string name() const {
    return "B" + std::to_string(B) + " Sq" + std::to_string(Sq) + " Sk" + std::to_string(Sk) + " Hq" + std::to_string(Hq) +
           " Hkv" + std::to_string(Hkv) + " D" + std::to_string(D) + (mask.causal ? " causal" : "") +
           (mask.align == CausalAlign::kTopLeft ? "-topleft" : "") + " win(" + std::to_string(mask.window_left) + "," +
           std::to_string(mask.window_right) + ")" + (softcap > 0 ? " softcap" : "") + (dt == DType::kFloat16 ? " fp16" : " bf16") +
           (strided ? " strided" : "") + (lq.empty() ? "" : " varlen");
  }
};

}  // namespace attnkit::test
