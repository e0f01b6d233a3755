// bench/attention_bwd_probe.cu — A/B probe of the softmax attention backward: times the bf16 D64 /
// D128 (and, one shape at a time, D256) instantiations (preprocess, main kernel, dQ postprocess: one launch_attention_bwd) at a few
// shapes with CUDA events (median of 30 launches), the default and the deterministic (ordered dQ,
// one chain or two: AttnBwdArgs::dq_chains) modes alternated, nothing else linked in; prints a
// fingerprint of dq per mode (sum |dq|, a hash of its bits) to compare variants. Built once
// per variant by bench/attention_fwd_ab.sh (PROBE=attention_bwd_probe), whose header copies
// shadow the tree's. Not a benchmark of record (no peers; bench/bench_attention_bwd.py is): a
// bisecting and profiling tool. CMake builds the tree's own variant as the attention_bwd_probe
// target.
//   bwd_probe                        the default shapes, twice
//   bwd_probe D S B [causal] [mode]  one shape, mode 0 default (dq_zeroed_rule), 1 / 2 ordered dQ
//                                    in 1 / 2 chains, 3 the default with the first-writer claims
//                                    at any length, 4 the default with the zeroing at any length
//                                    (for ncu: -k regex:attention_bwd_kernel -s 2 -c 1);
//                                    PROBE_HEADS=n: n heads instead of 2048 / D; PROBE_HKV=n:
//                                    n kv heads (GQA; default: as many as query heads);
//                                    PROBE_PACK=1: GQA's heads packed in the CTA (dK / dV in
//                                    registers: AttnBwdArgs::heads_per_cta_log2), 0: atomics;
//                                    PROBE_PACK_LOG2=n: 2^n heads a CTA (less than a group:
//                                    atomics over the group's CTAs);
//                                    PROBE_SPLIT=1: per-query-head dK / dV buffers (split_dkv)
//   PROBE_DQ_AFTER_HEADS=0: the dq postprocess after the main kernel, not beside its tail
//   (AttnBwdArgs::dq_after_heads, on by default as in the dispatcher); PROBE_PRE_SMS=n: the
//   preprocess on n SMs beside the main kernel (AttnBwdArgs::preprocess_sms; 0: before it; by
//   default preprocess_sms_rule)
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/probe_fill.cuh"
#include "src/cuda/attention/bwd_launch.cuh"
#include "src/cuda/attention/bwd_workspace.hpp"
#include "src/cuda/attention/fwd_launch.cuh"

using namespace attnkit::cuda;
using Elt = cutlass::bfloat16_t;

// One shape: the forward once (for O and a real LSE), then each mode's backward timed.
template <int D>
void run_case(int B, int S, bool causal, const std::vector<int>& modes, int sms, int* counter) {
  // PROBE_HEADS=n: n heads instead of 2048 / D (to move the grid's CTA count by whole waves).
  const char* heads_env = std::getenv("PROBE_HEADS");
  const int H = heads_env ? atoi(heads_env) : 2048 / D;
  const char* hkv_env = std::getenv("PROBE_HKV");
  const int Hkv = hkv_env ? atoi(hkv_env) : H;
  const size_t n = size_t(B) * S * H * D, nk = size_t(B) * S * Hkv * D;
  Elt *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float* lse;
  for (Elt** p : {&q, &o, &dout, &dq}) cudaMalloc(p, n * 2);
  for (Elt** p : {&k, &v, &dk, &dv}) cudaMalloc(p, nk * 2);
  cudaMalloc(&lse, size_t(B) * H * S * 4);
  fill<<<1024, 256>>>(q, n, 1); fill<<<1024, 256>>>(k, nk, 2); fill<<<1024, 256>>>(v, nk, 3); fill<<<1024, 256>>>(dout, n, 4);
  AttnFwdArgs f;
  f.q = q; f.k = k; f.v = v; f.out = o; f.lse = lse;
  for (auto* s : {f.q_stride, f.o_stride}) { s[0] = int64_t(S) * H * D; s[1] = H * D; s[2] = D; }
  for (auto* s : {f.k_stride, f.v_stride}) { s[0] = int64_t(S) * Hkv * D; s[1] = Hkv * D; s[2] = D; }
  f.lse_stride[0] = int64_t(H) * S; f.lse_stride[1] = S; f.lse_stride[2] = 1;
  f.batch = B; f.seqlen_q = f.seqlen_k = f.max_seqlen_q = S; f.heads_q = H; f.heads_kv = Hkv;
  f.tile_counter = counter; f.scale = 1.f / sqrtf(float(D)); f.mask.causal = causal; f.num_sms = sms;
  // PROBE_SOFTCAP=c: the tanh softcap c on both passes.
  if (const char* e = std::getenv("PROBE_SOFTCAP")) f.softcap = float(atof(e));
  attn::launch_attention_fwd<Elt, D>(f);

  AttnBwdArgs a;
  a.q = q; a.k = k; a.v = v; a.out = o; a.dout = dout; a.lse = lse; a.dq = dq; a.dk = dk; a.dv = dv;
  for (auto* s : {a.q_stride, a.o_stride, a.do_stride, a.dq_stride}) { s[0] = int64_t(S) * H * D; s[1] = H * D; s[2] = D; }
  for (auto* s : {a.k_stride, a.v_stride, a.dk_stride, a.dv_stride}) { s[0] = int64_t(S) * Hkv * D; s[1] = Hkv * D; s[2] = D; }
  std::memcpy(a.lse_stride, f.lse_stride, sizeof(a.lse_stride));
  a.batch = B; a.seqlen_q = a.seqlen_k = a.max_seqlen_q = a.max_seqlen_k = S; a.heads_q = H; a.heads_kv = Hkv;
  a.head_dim = D; a.scale = f.scale; a.mask.causal = causal; a.softcap = f.softcap;
  // The dispatcher's memory-system input to the launch rules (current_device_fast_dram, not linked
  // here): PROBE_FAST_DRAM=0 / 1 forces it, else the device's peak bandwidth decides.
  int khz = 0, bits = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  a.fast_dram = 2.0 * khz * 1e3 * (bits / 8.0) / 1e12 >= 4.0;
  if (const char* e = std::getenv("PROBE_FAST_DRAM")) a.fast_dram = atoi(e) != 0;
  const char* after_env = std::getenv("PROBE_DQ_AFTER_HEADS");
  a.dq_after_heads = !after_env || atoi(after_env) != 0;
  if (const char* pre_env = std::getenv("PROBE_PRE_SMS")) a.preprocess_sms = atoi(pre_env);
  const char* pack_env = std::getenv("PROBE_PACK");
  int pack = 0;
  if (Hkv != H && pack_env && atoi(pack_env) != 0) while ((Hkv << pack) < H) ++pack;
  // PROBE_PACK_LOG2=n: 2^n query heads a CTA, fewer than the group (dK / dV still atomics).
  if (const char* e = std::getenv("PROBE_PACK_LOG2")) pack = atoi(e);
  a.heads_per_cta_log2 = pack;
  BwdShape shape;
  shape.heads_per_cta_log2 = pack;
  shape.batch = B; shape.sq = shape.sk = S; shape.heads_q = H; shape.heads_kv = Hkv; shape.head_dim = D; shape.ordered_dq = true;
  shape.dq_chains = 2;
  // PROBE_SPLIT=1: GQA's dK / dV through per-query-head buffers (AttnBwdArgs::split_dkv), not atomics.
  const char* split_env = std::getenv("PROBE_SPLIT");
  a.split_dkv = shape.split_dkv = split_env && atoi(split_env) != 0;
  const BwdWorkspace ws(shape);
  char* base;
  cudaMalloc(&base, ws.total);
  const double flops = 10.0 * B * H * double(S) * S * D * (causal ? 0.5 : 1.0);
  for (int mode : modes) {
    a.ordered_dq = mode == 1 || mode == 2;
    ws.carve(base, a);
    a.dq_chains = mode == 2 ? 2 : 1;
    // mode 3: the default with the claims at any length; mode 4: with the zeroing at any length
    a.dq_zeroed = (mode == 0 && dq_zeroed_rule(false, S, causal, D, a.fast_dram)) || mode == 4;
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    std::vector<float> ts;
    for (int it = 0; it < 33; ++it) {
      cudaEventRecord(e0);
      attn::launch_attention_bwd<Elt, D>(a);
      cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      if (it >= 3) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    const double ms = ts[ts.size() / 2];
    // Fingerprints, to compare variants: sum |x| and a hash of the bits of dq and dk (equal across
    // builds in the ordered modes when the adds are the same; the default mode's order, and GQA's
    // dK / dV atomics, vary run to run).
    auto fingerprint = [](const Elt* x, size_t count, double& sum, uint32_t& hash) {
      std::vector<uint16_t> h(count);
      cudaMemcpy(h.data(), x, count * 2, cudaMemcpyDeviceToHost);
      sum = 0;
      hash = 2166136261u;
      for (uint16_t b : h) {
        uint32_t bits = uint32_t(b) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        sum += std::fabs(f);
        hash = (hash ^ b) * 16777619u;
      }
    };
    double sum, dk_sum;
    uint32_t hash, dk_hash;
    fingerprint(dq, n, sum, hash);
    fingerprint(dk, nk, dk_sum, dk_hash);
    printf("D%-3d S%-5d B%-2d H%-3d Hkv%-3d pack%d%s %-6s %-4s %-5s pre%-3d %7.3f ms %6.1f TFLOP/s  dq sum %.6e hash %08x  dk sum %.6e hash %08x  err=%s\n",
           D, S, B, H, Hkv, pack, a.split_dkv ? " split" : "", causal ? "causal" : "",
           mode == 0 ? "" : mode == 1 ? "det1" : mode == 2 ? "det2" : mode == 3 ? "claim" : "zero", a.dq_after_heads ? "after" : "", a.preprocess_sms,
           ms, flops / ms / 1e9, sum, hash, dk_sum, dk_hash, cudaGetErrorString(cudaGetLastError()));
    cudaEventDestroy(e0); cudaEventDestroy(e1);
  }
  for (Elt* p : {q, k, v, o, dout, dq, dk, dv}) cudaFree(p);
  cudaFree(lse); cudaFree(base);
}

int main(int argc, char** argv) {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int* counter; cudaMalloc(&counter, 16);
  // PROBE_PAD_MB=n: a dummy allocation first, moving every buffer's physical placement (to tell a
  // code change from a memory-placement effect).
  void* pad = nullptr;
  if (const char* e = std::getenv("PROBE_PAD_MB")) cudaMalloc(&pad, size_t(atoi(e)) << 20);
  if (argc >= 4) {
    const int d = atoi(argv[1]), s = atoi(argv[2]), b = atoi(argv[3]);
    const bool causal = argc >= 5 && atoi(argv[4]) != 0;
    const int mode = argc >= 6 ? atoi(argv[5]) : 0;
    if (d == 64) run_case<64>(b, s, causal, {mode}, sms, counter);
    else if (d == 256) run_case<256>(b, s, causal, {mode}, sms, counter);  // one shape only: the split-D kernel
    else run_case<128>(b, s, causal, {mode}, sms, counter);
    return 0;
  }
  for (int rep = 0; rep < 2; ++rep) {  // the modes in one order, then in the reverse one
    const std::vector<int> modes = rep ? std::vector<int>{2, 1, 0} : std::vector<int>{0, 1, 2};
    run_case<128>(8, 2048, false, modes, sms, counter);
    run_case<128>(8, 2048, true, modes, sms, counter);
    run_case<128>(1, 16384, false, modes, sms, counter);
    run_case<128>(1, 16384, true, modes, sms, counter);
    run_case<64>(8, 2048, false, modes, sms, counter);
    run_case<64>(8, 2048, true, modes, sms, counter);
  }
  return 0;
}
