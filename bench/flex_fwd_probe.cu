// bench/flex_fwd_probe.cu — A/B probe of the flex attention forward through the public API
// (flex_attention_forward): the catalog at bench_flex.py's shapes (B1 H16 S16384 D128 bf16; noop,
// causal / sliding window 1024 / ALiBi + causal through a BlockMask) and its GQA decode (B8 Hq32
// Hkv8 Sq1 Sk16384), CUDA events, median of 30 launches. Built once per kernel variant by
// bench/flex_fwd_ab.sh (the variant's flex kernel and dispatch objects linked before the library):
// a bisecting tool, not a benchmark of record (no peers; bench/bench_flex.py is).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "attnkit/flex.hpp"

using namespace attnkit;

namespace {

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

TensorView on_gpu(void* p, DType dt, std::initializer_list<int64_t> shape) {
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
    auto up = [](const std::vector<int32_t>& v) {
      auto b = std::make_unique<Buffer>(v.size() * 4);
      cudaMemcpy(b->p, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
      return b;
    };
    dnum = up(num); didx = up(idx); dfull_num = up(full_num); dfull_idx = up(full_idx);
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

float median_ms(FlexFwdParams& p) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int it = 0; it < 33; ++it) {
    cudaEventRecord(e0);
    const Status st = flex_attention_forward(p);
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

void run(const char* name, int64_t B, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, bool alibi, bool causal,
         int64_t window, bool block_mask, int64_t doc_len = 0) {
  const int64_t D = 128;
  Buffer q(B * hq * sq * D * 2), k(B * hkv * sk * D * 2), v(B * hkv * sk * D * 2), o(B * hq * sq * D * 2),
      lse(B * hq * sq * 4), slopes(hq * 4), doc_q(B * sq * 4), doc_kv(B * sk * 4);
  fill<<<1024, 256>>>(static_cast<uint16_t*>(q.p), B * hq * sq * D, 1);
  fill<<<1024, 256>>>(static_cast<uint16_t*>(k.p), B * hkv * sk * D, 2);
  fill<<<1024, 256>>>(static_cast<uint16_t*>(v.p), B * hkv * sk * D, 3);
  std::vector<float> hs(hq);
  for (int64_t h = 0; h < hq; ++h) hs[h] = 0.01f * float(h + 1);
  cudaMemcpy(slopes.p, hs.data(), hq * 4, cudaMemcpyHostToDevice);
  FlexFwdParams p;
  p.q = on_gpu(q.p, DType::kBFloat16, {B, hq, sq, D});
  p.k = on_gpu(k.p, DType::kBFloat16, {B, hkv, sk, D});
  p.v = on_gpu(v.p, DType::kBFloat16, {B, hkv, sk, D});
  p.out = on_gpu(o.p, DType::kBFloat16, {B, hq, sq, D});
  p.lse = on_gpu(lse.p, DType::kFloat32, {B, hq, sq});
  if (alibi) p.mods.alibi_slopes = on_gpu(slopes.p, DType::kFloat32, {hq});
  p.mods.causal = causal;
  if (doc_len > 0) {
    std::vector<int32_t> ids(B * std::max(sq, sk));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % std::max(sq, sk) / doc_len);
    cudaMemcpy(doc_q.p, ids.data(), B * sq * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(doc_kv.p, ids.data(), B * sk * 4, cudaMemcpyHostToDevice);
    p.mods.document_ids_q = on_gpu(doc_q.p, DType::kInt32, {B, sq});
    p.mods.document_ids_kv = on_gpu(doc_kv.p, DType::kInt32, {B, sk});
  }
  p.mods.sliding_window = window;
  const std::unique_ptr<BlockMask> bm = block_mask ? std::make_unique<BlockMask>(sq, window, doc_len) : nullptr;
  if (bm) p.block_mask = bm->view();
  Buffer ws(flex_forward_workspace_size(p));
  p.workspace = Workspace{ws.p, flex_forward_workspace_size(p)};
  const float ms = median_ms(p);
  const double density = bm ? bm->density() : 1.0;
  const double flops = 4.0 * B * hq * double(sq) * sk * D * density;
  const double kv_gbs = 2.0 * B * hkv * sk * D * 2 / ms / 1e6;
  std::printf("%-14s %8.3f ms %7.1f TFLOP/s %7.0f GB/s(KV)  err=%s\n", name, ms, flops / ms / 1e9, kv_gbs,
              cudaGetErrorString(cudaGetLastError()));
}

}  // namespace

int main() {
  run("noop", 1, 16, 16, 16384, 16384, false, false, -1, false);
  run("causal", 1, 16, 16, 16384, 16384, false, true, -1, true);
  run("sliding1024", 1, 16, 16, 16384, 16384, false, true, 1024, true);
  run("document_causal", 1, 16, 16, 16384, 16384, false, true, -1, true, 2048);
  run("alibi_causal", 1, 16, 16, 16384, 16384, true, true, -1, true);
  run("gqa_dec_noop", 8, 32, 8, 1, 16384, false, false, -1, false);
  run("gqa_dec_alibi", 8, 32, 8, 1, 16384, true, false, -1, false);
  return 0;
}
