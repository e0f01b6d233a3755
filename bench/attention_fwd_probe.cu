// bench/attention_fwd_probe.cu — A/B probe of the softmax attention forward kernel: times the
// bf16 D64 / D128 (and, one shape at a time, D256) instantiations at a few shapes with CUDA events
// (median of 40 launches), nothing else linked in. Built once per variant by bench/attention_fwd_ab.sh, whose header copies shadow the tree's, so
// several kernel variants compile in parallel in about a minute and run in seconds on the device.
// Not a benchmark of record (no peers; bench/bench_attention.py is): a bisecting tool. CMake builds
// the tree's own variant as the attention_fwd_probe target.
//   fwd_probe                   the default shapes, twice
//   fwd_probe D S B [causal [softcap]]  one shape (causal: any word but 0; softcap: the cap;
//                                       for ncu: -k regex:attention_fwd -s 3 -c 1)
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <vector>
#include "bench/probe_fill.cuh"
#include "src/cuda/attention/fwd_launch.cuh"

using namespace attnkit::cuda;
using Elt = cutlass::bfloat16_t;

template <int D>
void run_case(int B, int S, bool causal, int sms, int* counter, float softcap = 0.f) {
  const int H = 2048 / D;
  size_t n = size_t(B) * S * H * D;
  Elt *q, *k, *v, *o; float* lse;
  cudaMalloc(&q, n * 2); cudaMalloc(&k, n * 2); cudaMalloc(&v, n * 2); cudaMalloc(&o, n * 2);
  cudaMalloc(&lse, size_t(B) * H * S * 4);
  fill<<<1024, 256>>>(q, n, 1); fill<<<1024, 256>>>(k, n, 2); fill<<<1024, 256>>>(v, n, 3);
  AttnFwdArgs a;
  a.q = q; a.k = k; a.v = v; a.out = o; a.lse = lse;
  for (auto* s : {a.q_stride, a.k_stride, a.v_stride, a.o_stride}) { s[0] = int64_t(S) * H * D; s[1] = H * D; s[2] = D; }
  a.lse_stride[0] = int64_t(H) * S; a.lse_stride[1] = S; a.lse_stride[2] = 1;
  a.batch = B; a.seqlen_q = a.seqlen_k = a.max_seqlen_q = S; a.heads_q = a.heads_kv = H;
  a.tile_counter = counter; a.scale = 1.f / sqrtf(float(D)); a.mask.causal = causal; a.num_sms = sms;
  a.softcap = softcap;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int it = 0; it < 43; ++it) {
    cudaEventRecord(e0);
    attn::launch_attention_fwd<Elt, D>(a);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    if (it >= 3) ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  double flops = 4.0 * B * H * double(S) * S * D * (causal ? 0.5 : 1.0);
  double ms = ts[ts.size() / 2];
  printf("D%-3d S%-5d %-6s %-10s %7.3f ms %6.1f TFLOP/s  err=%s\n", D, S, causal ? "causal" : "",
         softcap > 0.f ? "softcap" : "", ms, flops / ms / 1e9,
         cudaGetErrorString(cudaGetLastError()));
  cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(lse);
}

int main(int argc, char** argv) {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int* counter; cudaMalloc(&counter, 16);
  if (argc >= 4) {
    const int d = atoi(argv[1]), s = atoi(argv[2]), b = atoi(argv[3]);
    const bool causal = argc >= 5 && std::strcmp(argv[4], "0") != 0;  // any word but 0
    const float softcap = argc >= 6 ? float(atof(argv[5])) : 0.f;
    if (d == 64) run_case<64>(b, s, causal, sms, counter, softcap);
    else if (d == 256) run_case<256>(b, s, causal, sms, counter, softcap);
    else run_case<128>(b, s, causal, sms, counter, softcap);
    return 0;
  }
  for (int rep = 0; rep < 2; ++rep) {
    run_case<128>(32, 512, false, sms, counter);
    run_case<128>(8, 2048, false, sms, counter);
    run_case<128>(8, 2048, true, sms, counter);
    run_case<128>(1, 16384, false, sms, counter);
    run_case<128>(1, 16384, true, sms, counter);
    run_case<128>(1, 16384, true, sms, counter, 30.f);
    run_case<64>(8, 2048, false, sms, counter);
    run_case<64>(1, 16384, false, sms, counter);
  }
  return 0;
}
