# src/cuda/instantiations.cmake — THE table of CUDA kernel instantiations.
#
# Each row generates one translation unit (one instantiation per TU, so builds parallelise and a
# TU stays within CI's memory). Only what changes registers or shared memory is instantiated (head
# dim, dtype, tile shape, a few feature bits); everything else is a runtime argument.
# Budget: ATTNKIT_CUDA_TU_BUDGET translation units in total, hand-written ones included.
#
#   attnkit_instantiate(<template .cu.in> <unit name> VAR=value ...)

set(ATTNKIT_CUDA_TU_BUDGET 40)

set(ATTNKIT_CUDA_HANDWRITTEN_TUS
  src/cuda/runtime.cu
)

attnkit_instantiate(src/cuda/common/wgmma_smoke.cu.in wgmma_smoke_bf16 ELEMENT=cute::bfloat16_t)
attnkit_instantiate(src/cuda/common/wgmma_smoke.cu.in wgmma_smoke_fp16 ELEMENT=cute::half_t)
