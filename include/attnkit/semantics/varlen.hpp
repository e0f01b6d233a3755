// attnkit/semantics/varlen.hpp — packed variable-length batches: sequence i is rows cu[i] .. cu[i+1]-1.
#pragma once
#include <cstdint>
#include "attnkit/config.hpp"

namespace attnkit {

struct SeqSpan {
  int64_t start = 0;  // first row in the packed tensor
  int64_t len = 0;
};

template <class Index>
ATTNKIT_HD SeqSpan seq_span(const Index* cu_seqlens, int64_t i) {
  return {static_cast<int64_t>(cu_seqlens[i]), static_cast<int64_t>(cu_seqlens[i + 1]) - static_cast<int64_t>(cu_seqlens[i])};
}

}  // namespace attnkit
