// src/cuda/cuda_status.hpp — a CUDA runtime error as the op's Status.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "attnkit/status.hpp"

namespace attnkit::cuda {

inline Status cuda_status(cudaError_t err, const char* op) {
  if (err == cudaSuccess) return Status::Ok();
  return {StatusCode::kBackendError, std::string(op) + ": " + cudaGetErrorString(err)};
}

}  // namespace attnkit::cuda
