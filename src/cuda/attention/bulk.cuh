// src/cuda/attention/bulk.cuh — the 1-D bulk reduce-add and store (shared -> global fp32, in L2)
// and the waits on their bulk group, as one thread issues them. CuTe has the bulk copies but not
// the add.
#pragma once
#include <cute/arch/copy_sm90_tma.hpp>

namespace attnkit::cuda::attn {

// global[0 .. bytes/4) += shared[0 .. bytes/4), element-wise in fp32; bytes a multiple of 16.
CUTE_DEVICE void bulk_reduce_add_f32(float* global, const float* shared, int bytes) {
  const uint32_t s = cute::cast_smem_ptr_to_uint(shared);
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(global), "r"(s), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// global[0 .. bytes/4) = shared[0 .. bytes/4); bytes a multiple of 16.
CUTE_DEVICE void bulk_store_f32(float* global, const float* shared, int bytes) {
  const uint32_t s = cute::cast_smem_ptr_to_uint(shared);
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(global), "r"(s), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// The last issued bulk op has finished reading shared memory (the buffer may be rewritten).
CUTE_DEVICE void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }

// Every issued bulk op has completed, its writes performed.
CUTE_DEVICE void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Orders this thread's completed bulk (async proxy) writes to global memory before its later
// generic accesses, e.g. a release that publishes them.
CUTE_DEVICE void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// *p += v with release semantics at GPU scope: this thread's earlier writes (and the bulk adds it
// has waited for) are visible to whoever acquires the new value. One instruction, no full fence.
CUTE_DEVICE void red_release_add(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// p[0 .. 4) += v, one vector reduction in L2 (relaxed, GPU scope; sm_90's red.v4.f32). p 16-byte aligned.
CUTE_DEVICE void red_add_v4_f32(float* p, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}

CUTE_DEVICE int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Blocks until *count >= target (acquire: what was released before each count is visible). Counts
// tie the backward's kernels that overlap (AttnBwdArgs::dq_after_heads, preprocess_sms). The longest
// legitimate wait is about one pass of the preprocess over every head (seconds on the largest
// inputs that fit); ten minutes without reaching the target is a bug, made a launch error instead
// of a hang.
CUTE_DEVICE void wait_for_count(const int* count, int target) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (load_acquire(count) < target) {
    __nanosleep(200);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > 600ull * 1000 * 1000 * 1000) __trap();
  }
}

}  // namespace attnkit::cuda::attn
