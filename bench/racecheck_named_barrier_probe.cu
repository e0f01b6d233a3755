// bench/racecheck_named_barrier_probe.cu — the chunked GDN forward's loader / state handoff of the
// per-row gate factors, alone, for compute-sanitizer's racecheck (docs/perf/gdn_chunk_fwd.md, "The
// final state (ht) by row pieces": racecheck reports hazards between chunk_gate_factors' stores and
// the state warpgroup's reads in the recurrence kernel; this tells the tool from the kernel).
//
// One CTA of two warpgroups and a ring of 3 stages of [4][64] floats in shared memory. The
// producer (threads 0..127) writes stage j % 3 with plain stores — thread r < 64 factors 0 and 2 of
// row r, thread 64 + r factors 1 and 3 — and arrives on "full"; the consumer (128..255) syncs on
// "full", reads every factor of the stage, and arrives on "empty"; the producer syncs on the
// stage's "empty" before writing it again, exactly the order of chunk_fwd_load.cuh's loop.
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o /tmp/rc bench/racecheck_named_barrier_probe.cu
//   compute-sanitizer --tool racecheck /tmp/rc     (prints the sum; racecheck its hazards, if any)
#include <cstdio>

#include <cuda_runtime.h>

namespace {

constexpr int kStages = 3, kRows = 64, kChunks = 16;
constexpr int kFull = 3, kEmpty = 6;  // the recurrence kernel's barrier ids (ChunkBarriers)

__device__ void bar_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ void bar_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

__global__ void handoff(float* out) {
  __shared__ float gate[kStages][4][kRows];
  const int tid = threadIdx.x;
  if (tid < 128) {  // the loader
    const int r = tid % kRows;
    for (int j = 0; j < kChunks; ++j) {
      const int s = j % kStages;
      if (j >= kStages) bar_sync(kEmpty + s);  // chunk j - 3's reads of stage s are done
      if (tid < kRows) {
        gate[s][0][r] = 1.f + j + r;
        gate[s][2][r] = 2.f + j;
      } else {
        gate[s][1][r] = 3.f + j;
        gate[s][3][r] = 4.f + r;
      }
      bar_arrive(kFull + s);
    }
    for (int j = kChunks - kStages; j < kChunks; ++j) bar_sync(kEmpty + j % kStages);  // the last rounds
  } else {  // the state warpgroup
    const int t = tid - 128;
    float acc = 0.f;
    for (int j = 0; j < kChunks; ++j) {
      const int s = j % kStages;
      bar_sync(kFull + s);
      for (int f = 0; f < 4; ++f) acc += gate[s][f][(t + 7 * f) % kRows];
      bar_arrive(kEmpty + s);
    }
    out[t] = acc;
  }
}

}  // namespace

int main() {
  float* out = nullptr;
  if (cudaMalloc(&out, 128 * sizeof(float)) != cudaSuccess) return 1;
  handoff<<<1, 256>>>(out);
  float host[128];
  const cudaError_t err = cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  double sum = 0;
  for (float x : host) sum += x;
  std::printf("sum %.1f\n", sum);
  cudaFree(out);
  return 0;
}
