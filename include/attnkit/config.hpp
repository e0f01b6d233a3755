// attnkit/config.hpp — macros shared by host and device code.
#pragma once

// Functions in the semantics headers are compiled for both the CPU reference and the CUDA
// kernels, so the two backends evaluate masks, head maps and numerics with the same code.
#if defined(__CUDACC__)
#define ATTNKIT_HD __host__ __device__ __forceinline__
#else
#define ATTNKIT_HD inline
#endif
