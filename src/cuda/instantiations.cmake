# src/cuda/instantiations.cmake — THE table of CUDA kernel instantiations.
#
# Each row generates one translation unit (one instantiation per TU, so builds parallelise and a
# TU stays within CI's memory). Only what changes registers or shared memory is instantiated (head
# dim, dtype, tile shape, a few feature bits); everything else is a runtime argument.
# Budget: ATTNKIT_CUDA_TU_BUDGET translation units in total, hand-written ones included.
#
#   attnkit_instantiate(<template .cu.in> <unit name> VAR=value ...)

# 43: the GDN chunked backward added its dispatch and one unit per K (2026-11-22); CI compiles all
# of them in ~25 of its 90 minutes.
# 49: the flex forward's GQA-packed short-query units (2026-11-23; each ~3.5 min on CI's 2 cores).
set(ATTNKIT_CUDA_TU_BUDGET 49)

set(ATTNKIT_CUDA_HANDWRITTEN_TUS
  src/cuda/runtime.cu
  src/cuda/attention/fwd_dispatch.cu
  src/cuda/attention/bwd_dispatch.cu
  src/cuda/gdn/decode.cu
  src/cuda/gdn/chunk_fwd_dispatch.cu
  src/cuda/gdn/bwd_dhu_dispatch.cu
  src/cuda/gdn/chunk_bwd_dispatch.cu
  src/cuda/flex/fwd_dispatch.cu
  src/cuda/flex/bwd_dispatch.cu
)

attnkit_instantiate(src/cuda/common/wgmma_smoke.cu.in wgmma_smoke_bf16 ELEMENT=cute::bfloat16_t)
attnkit_instantiate(src/cuda/common/wgmma_smoke.cu.in wgmma_smoke_fp16 ELEMENT=cute::half_t)

# Softmax attention forward: (dtype, head dim). Causal/window/softcap/varlen/GQA are runtime.
foreach(hd 64 128 256)
  attnkit_instantiate(src/cuda/attention/fwd_launch.cu.in attention_fwd_bf16_hd${hd} ELEMENT=cutlass::bfloat16_t HEAD_DIM=${hd})
  attnkit_instantiate(src/cuda/attention/fwd_launch.cu.in attention_fwd_fp16_hd${hd} ELEMENT=cutlass::half_t HEAD_DIM=${hd})
endforeach()

# Flex attention forward with the built-in catalog of mods: (dtype, head dim); the forward
# kernel above with flex's key-tile lists and score/mask functors (src/cuda/flex/fwd_variant.cuh).
# The packed units run the short-query path's GQA packing (each row its own head: a per-row
# mapping that cost the other shapes 4% when it was one instantiation).
foreach(hd 64 128 256)
  attnkit_instantiate(src/cuda/flex/fwd_launch.cu.in flex_fwd_bf16_hd${hd} ELEMENT=cutlass::bfloat16_t HEAD_DIM=${hd} VARIANT=CatalogVariant)
  attnkit_instantiate(src/cuda/flex/fwd_launch.cu.in flex_fwd_fp16_hd${hd} ELEMENT=cutlass::half_t HEAD_DIM=${hd} VARIANT=CatalogVariant)
  attnkit_instantiate(src/cuda/flex/fwd_launch.cu.in flex_fwd_packed_bf16_hd${hd} ELEMENT=cutlass::bfloat16_t HEAD_DIM=${hd} VARIANT=CatalogPackedVariant)
  attnkit_instantiate(src/cuda/flex/fwd_launch.cu.in flex_fwd_packed_fp16_hd${hd} ELEMENT=cutlass::half_t HEAD_DIM=${hd} VARIANT=CatalogPackedVariant)
endforeach()

# Softmax attention backward: (dtype, head dim).
foreach(hd 64 128 256)
  attnkit_instantiate(src/cuda/attention/bwd_launch.cu.in attention_bwd_bf16_hd${hd} ELEMENT=cutlass::bfloat16_t HEAD_DIM=${hd})
  attnkit_instantiate(src/cuda/attention/bwd_launch.cu.in attention_bwd_fp16_hd${hd} ELEMENT=cutlass::half_t HEAD_DIM=${hd})
endforeach()

# Flex attention backward with the built-in catalog: (dtype, head dim); the backward kernel above
# with flex's query-tile lists and score/mask functors (src/cuda/flex/bwd_variant.cuh).
foreach(hd 64 128 256)
  attnkit_instantiate(src/cuda/flex/bwd_launch.cu.in flex_bwd_bf16_hd${hd} ELEMENT=cutlass::bfloat16_t HEAD_DIM=${hd})
  attnkit_instantiate(src/cuda/flex/bwd_launch.cu.in flex_bwd_fp16_hd${hd} ELEMENT=cutlass::half_t HEAD_DIM=${hd})
endforeach()

# Gated delta rule chunked forward: (dtype, K = V). Varlen/GVA/gates/states are runtime.
foreach(hd 64 128)
  attnkit_instantiate(src/cuda/gdn/chunk_fwd_launch.cu.in gdn_chunk_fwd_bf16_hd${hd} ELEMENT=cutlass::bfloat16_t HEAD_DIM=${hd})
  attnkit_instantiate(src/cuda/gdn/chunk_fwd_launch.cu.in gdn_chunk_fwd_fp16_hd${hd} ELEMENT=cutlass::half_t HEAD_DIM=${hd})
endforeach()

# Gated delta rule reverse state-gradient pass (bwd_dhu): key head dim K; each unit holds both
# 16-bit types and the three value blocks (16, 32, 64), six small kernels. Gates/varlen/states are runtime.
foreach(hd 64 128)
  attnkit_instantiate(src/cuda/gdn/bwd_dhu_launch.cu.in gdn_bwd_dhu_hd${hd} HEAD_DIM=${hd})
endforeach()

# Gated delta rule chunked backward's own kernels (per-chunk dv_local and gradients, token passes):
# K = V; each unit holds both 16-bit types. Gates/varlen/GVA/states are runtime.
foreach(hd 64 128)
  attnkit_instantiate(src/cuda/gdn/chunk_bwd_launch.cu.in gdn_chunk_bwd_hd${hd} HEAD_DIM=${hd})
endforeach()
