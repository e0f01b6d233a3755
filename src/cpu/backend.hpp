// src/cpu/backend.hpp — the CPU backend's entry points. Params arrive already validated.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/flex.hpp"
#include "attnkit/gdn.hpp"

namespace attnkit::cpu {

Status attention_forward(const AttentionFwdParams& p);
Status attention_backward(const AttentionBwdParams& p);
Status flex_forward(const FlexFwdParams& p);
Status flex_backward(const FlexBwdParams& p);
Status gdn_forward(const GdnFwdParams& p);
Status gdn_backward(const GdnBwdParams& p);
Status gdn_decode(const GdnDecodeParams& p);
Status gdn_bwd_dhu(const GdnBwdDhuParams& p);

}  // namespace attnkit::cpu
