// attnkit/validate.hpp — the validation layer every backend runs before an op (also usable on its
// own, e.g. before instantiating flex_cpu.hpp with your own mods). Each failing check returns
// InvalidArgument with a message that names the argument and what was expected.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/flex.hpp"
#include "attnkit/gdn.hpp"

namespace attnkit {

Status validate(const AttentionFwdParams& p);
Status validate(const AttentionBwdParams& p);
Status validate(const FlexFwdParams& p);
Status validate(const FlexBwdParams& p);
Status validate(const GdnFwdParams& p);
Status validate(const GdnBwdParams& p);
Status validate(const GdnDecodeParams& p);
Status validate(const GdnBwdDhuParams& p);

}  // namespace attnkit
