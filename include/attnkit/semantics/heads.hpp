// attnkit/semantics/heads.hpp — grouped head maps (GQA/MQA for attention, GVA for GDN).
#pragma once
#include <cstdint>
#include "attnkit/config.hpp"

namespace attnkit {

// Query head h of Hq reads kv head h / (Hq / Hkv)  (spec/attention.md).
ATTNKIT_HD int64_t kv_head_of(int64_t hq, int64_t num_q_heads, int64_t num_kv_heads) {
  return hq / (num_q_heads / num_kv_heads);
}
// Value head hv of HV reads q/k head hv / (HV / H)  (spec/gdn.md).
ATTNKIT_HD int64_t qk_head_of(int64_t hv, int64_t num_v_heads, int64_t num_qk_heads) {
  return hv / (num_v_heads / num_qk_heads);
}

}  // namespace attnkit
