// src/cuda/attention/fwd_kernel.cuh — softmax attention forward on Hopper: the kernel entry.
//
// Persistent CTAs of 3 warpgroups walk the tiles of fwd_tile.cuh (or of the Variant's Tile:
// fwd_variant.cuh; flex attention is the other variant). Warpgroup 0 is the producer
// (fwd_producer.cuh: TMA loads of Q, K, V; registers given away); warpgroups 1 and 2 are the
// consumers (fwd_consumer.cuh: WGMMA, online softmax, epilogue), 64 query rows each.
// Shared state: the K and V pipelines (kStages buffers each), and per Q buffer (kQStages) two
// barriers — "full" (TMA landed) and "empty" (all 256 consumer threads are past their last read).
#pragma once
#include <cutlass/arch/reg_reconfig.h>

#include "src/cuda/attention/fwd_consumer.cuh"

namespace attnkit::cuda::attn {

// A TMA pipeline as seen by one role. The barriers are initialised once (kInitBarriers), before
// the roles split; each role then builds its own handle so no pipeline state lives across setmaxnreg.
template <class Pipeline, bool kInitBarriers = false>
CUTE_DEVICE Pipeline make_tma_pipeline(typename Pipeline::SharedStorage& storage, bool producer, int num_consumers,
                                       uint32_t transaction_bytes) {
  typename Pipeline::Params pp;
  pp.role = producer ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = num_consumers;
  pp.transaction_bytes = transaction_bytes;
  return Pipeline(storage, pp, Shape<_1, _1, _1>{}, cute::bool_constant<kInitBarriers>{});
}

// The K or V pipeline of the forward kernel.
template <class Traits, bool kInitBarriers = false>
CUTE_DEVICE typename Traits::Pipeline make_pipeline(typename Traits::Pipeline::SharedStorage& storage, bool producer) {
  return make_tma_pipeline<typename Traits::Pipeline, kInitBarriers>(storage, producer, 128 * Traits::kConsumerWGs,
                                                                     Traits::kTmaBytesKV);
}

template <class Traits, class Variant>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    attention_fwd_kernel(CUTE_GRID_CONSTANT const FwdParams<Traits, Variant> params) {
  using T = Traits;
  extern __shared__ char smem_raw[];
  auto& smem = *reinterpret_cast<typename T::SharedStorage*>(smem_raw);
  const int warp = __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
  const int wg = warp / 4;
  if (warp == 0 && cute::elect_one_sync()) {
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
    for (int i = 0; i < T::kQStages; ++i) {
      smem.barrier_q_full[i].init(1);
      smem.barrier_q_empty[i].init(128 * T::kConsumerWGs);
    }
  }
  make_pipeline<T, true>(smem.pipeline_k, wg == 0);  // initialises the K and V barriers
  make_pipeline<T, true>(smem.pipeline_v, wg == 0);
  __syncthreads();

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (warp == 0 && cute::elect_one_sync()) {
      auto pipe_k = make_pipeline<T>(smem.pipeline_k, true);
      auto pipe_v = make_pipeline<T>(smem.pipeline_v, true);
      producer(params, smem, pipe_k, pipe_v);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    auto pipe_k = make_pipeline<T>(smem.pipeline_k, false);
    auto pipe_v = make_pipeline<T>(smem.pipeline_v, false);
    Consumer<T, Variant>().run(params, smem, pipe_k, pipe_v);
  }
}

}  // namespace attnkit::cuda::attn
