// src/cuda/attention/bwd_kernel.cuh — softmax attention backward on Hopper: the main kernel entry.
//
// One CTA per (key tile, query head, sequence) — or, GQA's heads packed (AttnBwdArgs::
// heads_per_cta_log2), per (key tile, kv head, sequence) visiting every query head of the group — of
// 3 warpgroups. Warpgroup 0 is the producer
// (bwd_producer.cuh: warp 0 the Q / dO loads, warp 2 the K / V loads; warp 1, bwd_dq_writer.cuh:
// dQ reduce-adds; registers given away); warpgroups 1 and 2 are the consumers (bwd_consumer.cuh).
// Shared state: a barrier each for K and V, and the Q and dO pipelines.
// Runs between bwd_prepost.cuh's preprocess (lse2, delta) and postprocess (dq, GQA dk/dv), each of
// which may overlap it (AttnBwdArgs::preprocess_sms, dq_after_heads).
#pragma once
#include <cutlass/arch/reg_reconfig.h>

#include "src/cuda/attention/bwd_consumer.cuh"
#include "src/cuda/attention/bwd_variant.cuh"
#include "src/cuda/attention/fwd_kernel.cuh"  // make_tma_pipeline
#include "src/cuda/programmatic_launch.cuh"

namespace attnkit::cuda::attn {

// The Q or dO pipeline (see make_tma_pipeline).
template <class Traits, bool kInitBarriers = false>
CUTE_DEVICE typename Traits::Pipeline make_bwd_pipeline(typename Traits::Pipeline::SharedStorage& storage, bool producer) {
  return make_tma_pipeline<typename Traits::Pipeline, kInitBarriers>(storage, producer, 128 * Traits::kConsumerWGs,
                                                                     Traits::kTmaBytesQ);
}

// With the preprocess beside the main kernel (AttnBwdArgs::preprocess_sms): waits until every query
// tile of this CTA's heads is preprocessed (its lse2, delta, dQ semaphores, zeroed dq_accum).
template <class Traits, bool kPacked>
CUTE_DEVICE void wait_for_preprocess(const AttnBwdArgs& a) {
  const BwdCta cta = bwd_cta_unhoisted<kPacked>(a);
  const SeqInfo seq(a, cta.batch);
  const int tiles = (seq.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  for (int h = 0; h < cta_query_heads<kPacked>(a); ++h)  // (tile 0 always counts)
    wait_for_count(a.preprocessed_tiles + cta.batch * a.heads_q + cta.head + h, tiles > 0 ? tiles : 1);
}

template <class Traits, class Variant>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    attention_bwd_kernel(CUTE_GRID_CONSTANT const BwdParams<Traits, Variant> params) {
  using T = Traits;
  extern __shared__ char smem_raw[];
  auto& smem = *reinterpret_cast<typename T::SharedStorage*>(smem_raw);
  // The dq postprocess may start once every CTA got here (AttnBwdArgs::dq_after_heads; it waits
  // per head for the dQ counts, bwd_dq_writer.cuh).
  allow_dependents_to_start();
  const int warp = __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
  const int wg = warp / 4;
  if (warp == 0 && cute::elect_one_sync()) {
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
    smem.barrier_kv[0].init(1);
    smem.barrier_kv[1].init(1);
    smem.loads_issued = -1;
  }
  make_bwd_pipeline<T, true>(smem.pipeline_q, wg == 0);  // initialises the Q and dO barriers
  make_bwd_pipeline<T, true>(smem.pipeline_do, wg == 0);
  const bool beside = params.args.preprocess_sms > 0;
  if (beside && threadIdx.x == 0) wait_for_preprocess<T, Variant::template Tile<T>::kPacked>(params.args);
  __syncthreads();
  if (beside) fence_proxy_async_global();  // the preprocess's writes before this CTA's bulk reads / adds of them

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (warp == 0 && cute::elect_one_sync()) {
      auto pipe_q = make_bwd_pipeline<T>(smem.pipeline_q, true);
      auto pipe_do = make_bwd_pipeline<T>(smem.pipeline_do, true);
      bwd_producer<T>(params, smem, pipe_q, pipe_do);
    } else if (warp == 1) {
      bwd_dq_writer<T, Variant>(params, smem);
    } else if (warp == 2 && cute::elect_one_sync()) {
      bwd_load_kv<T>(params, smem);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    auto pipe_q = make_bwd_pipeline<T>(smem.pipeline_q, false);
    auto pipe_do = make_bwd_pipeline<T>(smem.pipeline_do, false);
    BwdConsumer<T, Variant>().run(params, smem, pipe_q, pipe_do);
  }
}

}  // namespace attnkit::cuda::attn
