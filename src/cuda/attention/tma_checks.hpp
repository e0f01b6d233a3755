// src/cuda/attention/tma_checks.hpp — what the TMA-fed attention kernels ask of a tensor beyond
// the op's own validation: a 16-byte aligned base and strides of whole 16-byte units.
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "attnkit/status.hpp"
#include "attnkit/tensor.hpp"
#include "src/cuda/unit_strides.hpp"

namespace attnkit::cuda {

inline Status check_tma_operand(const TensorView& t, const char* name) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return InvalidArgument(std::string(name) + ": the CUDA kernels need a 16-byte aligned data pointer");
  for (int d = 0; d + 1 < t.ndim; ++d)
    if (t.sizes[d] > 1 && (t.strides[d] * static_cast<int64_t>(dtype_size(t.dtype))) % 16 != 0)
      return InvalidArgument(std::string(name) + ": the CUDA kernels need strides that are multiples of 16 bytes, got " +
                             std::to_string(t.strides[d]) + " elements at dim " + std::to_string(d));
  return Status::Ok();
}

// Every tensor a backward kernel loads or stores (AttentionBwdParams or FlexBwdParams).
template <class BwdParams>
Status check_bwd_tma_operands(const BwdParams& p) {
  for (auto [t, name] : {std::pair{&p.q, "q"}, std::pair{&p.k, "k"}, std::pair{&p.v, "v"}, std::pair{&p.out, "out"},
                         std::pair{&p.dout, "dout"}, std::pair{&p.dq, "dq"}, std::pair{&p.dk, "dk"}, std::pair{&p.dv, "dv"}})
    ATTNKIT_RETURN_IF_ERROR(check_tma_operand(*t, name));
  return Status::Ok();
}

}  // namespace attnkit::cuda
