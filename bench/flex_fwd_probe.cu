// bench/flex_fwd_probe.cu — A/B probe of the flex attention forward through the public API
// (flex_attention_forward): the catalog at bench_flex.py's shapes (B1 H16 S16384 D128 bf16; noop,
// causal / sliding window 1024 / ALiBi + causal / softcap 30 + causal through a BlockMask) and its
// GQA decode (B8 Hq32 Hkv8 Sq1 Sk16384), CUDA events, median of 30 launches. Built once per kernel variant by
// bench/flex_fwd_ab.sh (the variant's flex kernel and dispatch objects linked before the library):
// a bisecting tool, not a benchmark of record (no peers; bench/bench_flex.py is).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/flex.hpp"
#include "flex_probe_common.cuh"

using namespace attnkit;
using namespace flex_probe;

namespace {

constexpr int64_t kMaskFollowsMods = -2;  // run()'s mask_window: the BlockMask of the mods' window / documents
constexpr int64_t kAllFull = -3;          // run()'s mask_window: a BlockMask listing every block as full
const char* g_only = nullptr;  // argv[2]: run only the row of that name (e.g. under ncu)

// One row. doc_len > 0: documents of doc_len tokens, < 0: -doc_len documents of random lengths.
// The BlockMask (block_mask) follows the mods (window, documents) unless mask_window says
// otherwise: a window of its own for the lists alone (the mods may then be off), or kAllFull.
void run(const char* name, int64_t B, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, bool alibi, bool causal,
         int64_t window, bool block_mask, int64_t doc_len = 0, int64_t mask_window = kMaskFollowsMods,
         double softcap = 0.0) {
  if (g_only && std::string(name) != g_only) return;
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
  p.mods.softcap = softcap;
  std::vector<int32_t> ids;  // doc_len > 0: documents of doc_len tokens; < 0: -doc_len of random lengths (B1, Sq = Sk)
  if (doc_len < 0) ids = random_documents(sq, int(-doc_len));
  if (doc_len > 0) {
    ids.resize(B * std::max(sq, sk));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % std::max(sq, sk) / doc_len);
  }
  if (doc_len != 0) {
    cudaMemcpy(doc_q.p, ids.data(), B * sq * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(doc_kv.p, ids.data(), B * sk * 4, cudaMemcpyHostToDevice);
    p.mods.document_ids_q = on_gpu(doc_q.p, DType::kInt32, {B, sq});
    p.mods.document_ids_kv = on_gpu(doc_kv.p, DType::kInt32, {B, sk});
  }
  p.mods.sliding_window = window;
  const std::unique_ptr<BlockMask> bm = !block_mask ? nullptr
                                       : mask_window == kAllFull ? std::make_unique<BlockMask>(sq, BlockMask::AllFull{})
                                       : doc_len < 0 ? std::make_unique<BlockMask>(sq, ids)
                                                     : std::make_unique<BlockMask>(sq, mask_window == kMaskFollowsMods ? window : mask_window, doc_len);
  if (bm) p.block_mask = bm->view();
  Buffer ws(flex_forward_workspace_size(p));
  p.workspace = Workspace{ws.p, flex_forward_workspace_size(p)};
  const float ms = median_ms([&] { return flex_attention_forward(p); });
  const double density = bm ? bm->density() : 1.0;
  const double flops = 4.0 * B * hq * double(sq) * sk * D * density;
  const double kv_gbs = 2.0 * B * hkv * sk * D * 2 / ms / 1e6;
  // The output's sum and hash (flex_probe_common.cuh), so that variants can be compared row by row.
  const cudaError_t err = cudaGetLastError();
  double osum;
  uint64_t ohash;
  checksum(o.p, size_t(B * hq * sq * D), &osum, &ohash);
  std::printf("%-14s %8.3f ms %7.1f TFLOP/s %7.0f GB/s(KV)  err=%s  osum=%.6e hash=%016llx\n", name, ms,
              flops / ms / 1e9, kv_gbs, cudaGetErrorString(err), osum, (unsigned long long)ohash);
}

}  // namespace

// `diag` adds rows that split the sparse masks' cost per visited block (docs/perf/flex_fwd.md,
// "Where the sliding window's time goes"): the noop at 9 key tiles a row (as the sliding window
// visits), the sliding window's BlockMask without its mask mods (the traversal alone) and with the
// causal part only, and a BlockMask listing every block as full (the traversal at long rows).
// `ROWS NAME` (ROWS: diag or anything else) runs only the row NAME, e.g. under ncu.
int main(int argc, char** argv) {
  if (argc > 2) g_only = argv[2];
  if (argc > 1 && std::string(argv[1]) == "diag") {
    run("noop_s1152_b14", 14, 16, 16, 1152, 1152, false, false, -1, false);
    run("band_no_mods", 1, 16, 16, 16384, 16384, false, false, -1, true, 0, 1024);
    run("band_causal_only", 1, 16, 16, 16384, 16384, false, true, -1, true, 0, 1024);
    run("blockmask_all_full", 1, 16, 16, 16384, 16384, false, false, -1, true, 0, kAllFull);
  }
  run("noop", 1, 16, 16, 16384, 16384, false, false, -1, false);
  run("causal", 1, 16, 16, 16384, 16384, false, true, -1, true);
  run("sliding1024", 1, 16, 16, 16384, 16384, false, true, 1024, true);
  run("document_causal", 1, 16, 16, 16384, 16384, false, true, -1, true, 2048);
  run("document_random", 1, 16, 16, 16384, 16384, false, true, -1, true, -8);
  run("alibi_causal", 1, 16, 16, 16384, 16384, true, true, -1, true);
  run("softcap_causal", 1, 16, 16, 16384, 16384, false, true, -1, true, 0, kMaskFollowsMods, 30.0);
  run("gqa_dec_noop", 8, 32, 8, 1, 16384, false, false, -1, false);
  run("gqa_dec_alibi", 8, 32, 8, 1, 16384, true, false, -1, false);
  return 0;
}
