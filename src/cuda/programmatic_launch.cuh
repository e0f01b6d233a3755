// src/cuda/programmatic_launch.cuh — programmatic dependent launch (sm_90): a kernel launched with
// `launch_after_trigger` may start before the kernel ahead of it in the stream has finished, as soon
// as every CTA of that kernel has called `allow_dependents_to_start()` (or exited). It then must not
// read that kernel's writes before `wait_for_prerequisites()`, which blocks until the kernel ahead
// has completed and its memory is visible. Work that needs nothing from the kernel ahead overlaps
// it: the flex backward's preprocess runs beside the small, latency-bound list kernels.
// Kernels in front of a normal launch ran to completion before its first CTA started, so what came
// before them in the stream is complete and visible either way. (Both instructions are no-ops
// without the attribute.)
#pragma once
#include <cuda_runtime.h>

#include <utility>

namespace attnkit::cuda {

__device__ __forceinline__ void allow_dependents_to_start() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_prerequisites() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// kernel<<<grid, block, smem, stream>>>(args...), allowed to start while the kernel ahead runs.
template <class... Params, class... Args>
cudaError_t launch_after_trigger(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                 Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace attnkit::cuda
