// bench/flex_probe_common.cuh — what the flex probes (flex_fwd_probe.cu, flex_bwd_probe.cu) share:
// bf16 inputs from a hash of the element index, device buffers, and a 128 x 128 BlockMask of a
// causal mask with an optional window or documents, and the median timing of a launch.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "attnkit/flex.hpp"

namespace flex_probe {

using namespace attnkit;

__global__ void fill(uint16_t* p, size_t n, uint32_t seed) {  // bf16 values in [-1.7, 1.7)
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 13; x *= 0x5bd1e995; x ^= x >> 15;
    const float f = (float(x & 0xffff) / 65536.f - 0.5f) * 3.4f;
    p[i] = uint16_t(__float_as_uint(f) >> 16);
  }
}

struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) { cudaMalloc(&p, std::max<size_t>(bytes, 16)); }
  ~Buffer() { cudaFree(p); }
};

inline TensorView on_gpu(void* p, DType dt, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(p, dt, Device::cuda(0), shape);
}

// A BlockMask (128 x 128 blocks) of a causal mask with an optional window or documents of doc_len
// (a multiple of 128) tokens: per query block, the partial blocks (the diagonal, the window's left
// edge) and the full ones between them.
struct BlockMask {
  std::vector<int32_t> num, idx, full_num, full_idx;
  std::unique_ptr<Buffer> dnum, didx, dfull_num, dfull_idx;
  int64_t nb;
  BlockMask(int64_t s, int64_t window, int64_t doc_len) : nb(s / 128) {
    num.assign(nb, 0); full_num.assign(nb, 0); idx.assign(nb * nb, 0); full_idx.assign(nb * nb, 0);
    for (int64_t qb = 0; qb < nb; ++qb) {
      int64_t lo = window < 0 ? 0 : std::max<int64_t>(0, qb * 128 - window);  // first visible key of the block's first row
      if (doc_len > 0) lo = qb * 128 / doc_len * doc_len;
      for (int64_t kb = lo / 128; kb <= qb; ++kb) {
        const bool full = kb < qb && (window < 0 || kb * 128 >= qb * 128 + 127 - window);
        if (full) full_idx[qb * nb + full_num[qb]++] = int32_t(kb);
        else idx[qb * nb + num[qb]++] = int32_t(kb);
      }
    }
    upload();
  }
  // Every block of an s x s score matrix listed as full (the BlockMask path with dense rows).
  struct AllFull {};
  BlockMask(int64_t s, AllFull) : nb(s / 128) {
    num.assign(nb, 0); full_num.assign(nb, int32_t(nb)); idx.assign(nb * nb, 0); full_idx.assign(nb * nb, 0);
    for (int64_t qb = 0; qb < nb; ++qb)
      for (int64_t kb = 0; kb < nb; ++kb) full_idx[qb * nb + kb] = int32_t(nb - 1 - kb);
    upload();
  }
  void upload() {
    auto up = [](const std::vector<int32_t>& v) {
      auto b = std::make_unique<Buffer>(v.size() * 4);
      cudaMemcpy(b->p, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
      return b;
    };
    dnum = up(num); didx = up(idx); dfull_num = up(full_num); dfull_idx = up(full_idx);
  }
  // A causal mask within documents given by sorted per-token ids: a block is listed where its
  // keys' and queries' id ranges meet, full where both hold one and the same document.
  BlockMask(int64_t s, const std::vector<int32_t>& sorted_ids) : nb(s / 128) {
    num.assign(nb, 0); full_num.assign(nb, 0); idx.assign(nb * nb, 0); full_idx.assign(nb * nb, 0);
    for (int64_t qb = 0; qb < nb; ++qb) {
      const int32_t q_lo = sorted_ids[qb * 128], q_hi = sorted_ids[qb * 128 + 127];
      for (int64_t kb = 0; kb <= qb; ++kb) {
        const int32_t k_lo = sorted_ids[kb * 128], k_hi = sorted_ids[kb * 128 + 127];
        if (k_hi < q_lo) continue;  // (sorted: the keys' ids are at most the queries')
        const bool full = kb < qb && k_lo == k_hi && k_hi == q_lo && q_lo == q_hi;
        if (full) full_idx[qb * nb + full_num[qb]++] = int32_t(kb);
        else idx[qb * nb + num[qb]++] = int32_t(kb);
      }
    }
    upload();
  }
  BlockMaskView view() const {
    BlockMaskView v;
    v.kv_num_blocks = on_gpu(dnum->p, DType::kInt32, {1, 1, nb});
    v.kv_indices = on_gpu(didx->p, DType::kInt32, {1, 1, nb, nb});
    v.full_kv_num_blocks = on_gpu(dfull_num->p, DType::kInt32, {1, 1, nb});
    v.full_kv_indices = on_gpu(dfull_idx->p, DType::kInt32, {1, 1, nb, nb});
    return v;
  }
  double density() const {
    double n = 0;
    for (int64_t qb = 0; qb < nb; ++qb) n += num[qb] + full_num[qb];
    return n / double(nb * nb);
  }
};

// Document ids as bench_flex.py draws them (torch.randint(0, docs, (S,)).sort()): `docs` documents
// of random lengths, their boundaries anywhere (most key blocks at a boundary partial).
// (A 32-bit LCG's bits 8-10 drew every id exactly s / docs times: 2048-token documents again.)
inline std::vector<int32_t> random_documents(int64_t s, int docs, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, docs - 1);
  std::vector<int32_t> ids(s);
  for (auto& id : ids) id = pick(rng);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Median of 30 timed launches (CUDA events) after 3 warm-up ones; NaN (and the message) on an error.
template <class F>
float median_ms(F&& launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int it = 0; it < 33; ++it) {
    cudaEventRecord(e0);
    const Status st = launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    if (!st.ok()) { std::printf("error: %s\n", st.message().c_str()); return NAN; }
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (it >= 3) ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// Sum and an FNV-1a hash of a bf16 tensor's bits (n elements on the GPU): equal hashes, equal tensors
// (almost surely); the sums compare variants that reorder the arithmetic.
inline void checksum(const void* p, size_t n, double* sum, uint64_t* hash) {
  std::vector<uint16_t> h(n);
  cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost);
  *sum = 0;
  *hash = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t(h[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    *sum += double(f);
    *hash = (*hash ^ h[i]) * 1099511628211ull;
  }
}

}  // namespace flex_probe
