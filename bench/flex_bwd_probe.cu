// bench/flex_bwd_probe.cu — A/B probe of the flex attention backward through the public API
// (flex_attention_backward): bench_flex.py's backward shapes (B1 H16 S16384 D128 bf16; noop, and
// causal / sliding window 1024 / documents of 2048 / 8 documents of random lengths as bench_flex.py
// draws them / ALiBi + causal / softcap 30 + causal through a BlockMask), default
// and deterministic, CUDA events, median of 30 launches; a dq checksum per row so that variants'
// ordered (deterministic) results can be compared bit for bit. Built once per kernel variant by
// `PROBE=flex_bwd bash bench/flex_fwd_ab.sh` (the variant's flex backward kernel and dispatch
// objects linked before the library):
// a bisecting tool, not a benchmark of record (no peers; bench/bench_flex.py is).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "attnkit/flex.hpp"
#include "flex_probe_common.cuh"

using namespace attnkit;
using namespace flex_probe;

namespace {

// doc_len > 0: documents of doc_len tokens; < 0: -doc_len documents of random lengths (bench_flex.py's).
void run(const char* name, bool alibi, bool causal, int64_t window, bool block_mask, int64_t doc_len,
         bool deterministic, double softcap = 0.0) {
  const int64_t B = 1, H = 16, S = 16384, D = 128, n = B * H * S * D;
  Buffer q(n * 2), k(n * 2), v(n * 2), o(n * 2), dout(n * 2), dq(n * 2), dk(n * 2), dv(n * 2), lse(B * H * S * 4),
      slopes(H * 4), doc(B * S * 4);
  fill<<<1024, 256>>>(static_cast<uint16_t*>(q.p), n, 1);
  fill<<<1024, 256>>>(static_cast<uint16_t*>(k.p), n, 2);
  fill<<<1024, 256>>>(static_cast<uint16_t*>(v.p), n, 3);
  fill<<<1024, 256>>>(static_cast<uint16_t*>(dout.p), n, 4);
  std::vector<float> hs(H);
  for (int64_t h = 0; h < H; ++h) hs[h] = 0.01f * float(h + 1);
  cudaMemcpy(slopes.p, hs.data(), H * 4, cudaMemcpyHostToDevice);
  FlexMods mods;
  if (alibi) mods.alibi_slopes = on_gpu(slopes.p, DType::kFloat32, {H});
  mods.causal = causal;
  mods.softcap = softcap;
  std::vector<int32_t> ids;
  if (doc_len < 0) ids = random_documents(S, int(-doc_len));
  if (doc_len > 0) {
    ids.resize(B * S);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % S / doc_len);
  }
  if (doc_len != 0) {
    cudaMemcpy(doc.p, ids.data(), B * S * 4, cudaMemcpyHostToDevice);
    mods.document_ids_q = on_gpu(doc.p, DType::kInt32, {B, S});
    mods.document_ids_kv = on_gpu(doc.p, DType::kInt32, {B, S});
  }
  mods.sliding_window = window;
  const std::unique_ptr<BlockMask> bm = !block_mask ? nullptr
                                       : doc_len < 0 ? std::make_unique<BlockMask>(S, ids)
                                                     : std::make_unique<BlockMask>(S, window, doc_len);

  FlexFwdParams f;
  f.q = on_gpu(q.p, DType::kBFloat16, {B, H, S, D});
  f.k = on_gpu(k.p, DType::kBFloat16, {B, H, S, D});
  f.v = on_gpu(v.p, DType::kBFloat16, {B, H, S, D});
  f.out = on_gpu(o.p, DType::kBFloat16, {B, H, S, D});
  f.lse = on_gpu(lse.p, DType::kFloat32, {B, H, S});
  f.mods = mods;
  if (bm) f.block_mask = bm->view();
  Buffer fws(flex_forward_workspace_size(f));
  f.workspace = Workspace{fws.p, flex_forward_workspace_size(f)};
  const Status fst = flex_attention_forward(f);
  if (!fst.ok()) { std::printf("%s: forward error: %s\n", name, fst.message().c_str()); return; }

  FlexBwdParams p;
  p.q = f.q; p.k = f.k; p.v = f.v; p.out = f.out; p.lse = f.lse;
  p.dout = on_gpu(dout.p, DType::kBFloat16, {B, H, S, D});
  p.dq = on_gpu(dq.p, DType::kBFloat16, {B, H, S, D});
  p.dk = on_gpu(dk.p, DType::kBFloat16, {B, H, S, D});
  p.dv = on_gpu(dv.p, DType::kBFloat16, {B, H, S, D});
  p.mods = mods;
  if (bm) p.block_mask = bm->view();
  p.deterministic = deterministic;
  Buffer ws(flex_backward_workspace_size(p));
  p.workspace = Workspace{ws.p, flex_backward_workspace_size(p)};
  const float ms = median_ms([&] { return flex_attention_backward(p); });
  const double density = bm ? bm->density() : 1.0;
  const double flops = 2.5 * 4.0 * B * H * double(S) * S * D * density;
  double sq, sk, sv;
  uint64_t hq, hk, hv;
  checksum(dq.p, n, &sq, &hq);
  checksum(dk.p, n, &sk, &hk);
  checksum(dv.p, n, &sv, &hv);
  std::printf("%-16s %s %8.3f ms %7.1f TFLOP/s  dq %.6e %016llx dk %016llx dv %016llx  err=%s\n", name,
              deterministic ? "det" : "def", ms, flops / ms / 1e9, sq, (unsigned long long)hq, (unsigned long long)hk,
              (unsigned long long)hv, cudaGetErrorString(cudaGetLastError()));
}

}  // namespace

// flex_bwd_probe [ROUNDS [CASE [det]]]: every case (default and deterministic) ROUNDS times, or only
// CASE (e.g. for ncu), in the default mode unless "det" follows.
int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 1;
  const char* only = argc > 2 ? argv[2] : nullptr;
  const bool only_det = argc > 3 && std::strcmp(argv[3], "det") == 0;
  for (int r = 0; r < rounds; ++r) {
    for (bool det : {false, true}) {
      auto pick = [&](const char* name) { return only ? std::strcmp(name, only) == 0 && det == only_det : true; };
      if (pick("noop")) run("noop", false, false, -1, false, 0, det);
      if (pick("causal")) run("causal", false, true, -1, true, 0, det);
      if (pick("sliding1024")) run("sliding1024", false, true, 1024, true, 0, det);
      if (pick("document_causal")) run("document_causal", false, true, -1, true, 2048, det);
      if (pick("document_random")) run("document_random", false, true, -1, true, -8, det);
      if (!det && pick("alibi_causal")) run("alibi_causal", true, true, -1, true, 0, det);
      if (!det && pick("softcap_causal")) run("softcap_causal", false, true, -1, true, 0, det, 30.0);
    }
  }
  return 0;
}
