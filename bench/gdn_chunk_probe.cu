// bench/gdn_chunk_probe.cu — the CUDA chunked GDN forward alone, for quick looks on the device:
// builds from its own few translation units in under a minute (bench/gdn_chunk_probe.sh), times
// the forward with events (median), and gives ncu a short process to profile.
//
//   gdn_chunk_probe B T H [reps [dump]]   K = V = 128, bf16, l2norm, scalar gate, final state;
//                                         with `dump`, writes o (16-bit) and the final state
//                                         (fp32) raw to dump.o / dump.ht
//   gdn_chunk_probe varlen NSEQ T H [reps [asc|desc]]  NSEQ sequences of random lengths summing
//                                         to T (as bench/bench_gdn_chunk.py's varlen case, other
//                                         lengths), optionally sorted (the CTAs' launch order)
//   gdn_chunk_probe check PREFIX          a set of small cases (dtypes, K 64/128, tails, varlen
//                                         with empty and 1-token sequences, GVA, unaligned rows,
//                                         many heads: the in-recurrence w / u path),
//                                         each dumped to PREFIX.<i>; built from two revisions
//                                         (gdn_chunk_probe.sh with PROBE_DIR, CUTLASS_INC), the
//                                         dumps compare two kernels (bench/gdn_chunk_probe_cmp.py);
//                                         each case's error against the float64 recurrence printed
// Not a test: the GPU tests (tests/cpp/gdn_gpu_test.cpp) check against the float64 recurrence.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnkit/numeric_types.hpp"
#include "src/cuda/gdn/api.hpp"

using namespace attnkit;

namespace {

struct Case {
  DType dt = DType::kBFloat16;
  int64_t D = 128, B = 1, T = 64, H = 1, HV = 1;
  std::vector<int64_t> seqlens;  // varlen when not empty (B = 1, T = sum)
  int64_t row_pad = 0;           // > 0: q, k, v, out rows padded by this many elements
};

uint16_t to16(float x, DType dt) { return dt == DType::kFloat16 ? float_to_fp16_bits(x) : float_to_bf16_bits(x); }

// [B, T, heads, D] with rows padded by c.row_pad elements.
TensorView rows_view(void* p, const Case& c, int64_t heads) {
  TensorView t = TensorView::contiguous(p, c.dt, Device::cuda(0), {c.B, c.T, heads, c.D + c.row_pad});
  t.sizes[3] = c.D;
  return t;
}

double from16(uint16_t x, DType dt) { return dt == DType::kFloat16 ? fp16_bits_to_float(x) : bf16_bits_to_float(x); }

// The float64 recurrence (spec/gdn.md, l2norm in the op, zero initial state) on the case's inputs:
// RMS(x - ref) / RMS(ref) of o (16-bit, unpadded rows) and of the final state, printed.
void print_error_vs_float64(const Case& c, const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                            const std::vector<uint16_t>& v, const std::vector<float>& g, const std::vector<uint16_t>& beta,
                            const std::vector<uint16_t>& out, const std::vector<float>& state) {
  const int64_t D = c.D, row = c.D + c.row_pad;
  std::vector<int64_t> b_of, t0_of, len_of;  // per sequence
  if (c.seqlens.empty()) {
    for (int64_t b = 0; b < c.B; ++b) b_of.push_back(b), t0_of.push_back(0), len_of.push_back(c.T);
  } else {
    int64_t t0 = 0;
    for (int64_t l : c.seqlens) b_of.push_back(0), t0_of.push_back(t0), len_of.push_back(l), t0 += l;
  }
  double eo = 0, ro = 0, eh = 0, rh = 0;
  std::vector<double> S(D * D), qn(D), kn(D), u(D);  // S [k][v]
  for (size_t n = 0; n < b_of.size(); ++n)
    for (int64_t hv = 0; hv < c.HV; ++hv) {
      std::fill(S.begin(), S.end(), 0.0);
      for (int64_t t = t0_of[n]; t < t0_of[n] + len_of[n]; ++t) {
        const int64_t tok = b_of[n] * c.T + t, qrow = (tok * c.H + hv / (c.HV / c.H)) * row, vrow = (tok * c.HV + hv) * row;
        double sq = 0, sk = 0;
        for (int64_t d = 0; d < D; ++d) {
          qn[d] = from16(q[qrow + d], c.dt), kn[d] = from16(k[qrow + d], c.dt);
          sq += qn[d] * qn[d], sk += kn[d] * kn[d];
        }
        for (int64_t d = 0; d < D; ++d) qn[d] /= std::sqrt(sq + 1e-6), kn[d] /= std::sqrt(sk + 1e-6);
        const double decay = std::exp(double(g[tok * c.HV + hv])), bt = from16(beta[tok * c.HV + hv], c.dt);
        for (double& x : S) x *= decay;
        for (int64_t j = 0; j < D; ++j) {
          double hk = 0;
          for (int64_t i = 0; i < D; ++i) hk += S[i * D + j] * kn[i];
          u[j] = bt * (from16(v[vrow + j], c.dt) - hk);
        }
        for (int64_t i = 0; i < D; ++i)
          for (int64_t j = 0; j < D; ++j) S[i * D + j] += kn[i] * u[j];
        for (int64_t j = 0; j < D; ++j) {
          double o = 0;
          for (int64_t i = 0; i < D; ++i) o += S[i * D + j] * qn[i];
          o /= std::sqrt(double(D));
          const double x = from16(out[vrow + j], c.dt) - o;
          eo += x * x, ro += o * o;
        }
      }
      for (int64_t i = 0; i < D * D; ++i) {
        const double x = state[(n * c.HV + hv) * D * D + i] - S[i];
        eh += x * x, rh += S[i] * S[i];
      }
    }
  std::printf("  vs the float64 recurrence: o %.3e, final state %.3e (rel RMS)\n", std::sqrt(eo / ro), std::sqrt(eh / rh));
}

// Runs the case: median ms of `reps` launches after 2 warm-ups; with `dump`, writes o and ht and
// prints their errors against the float64 recurrence.
double run_case(const Case& c, int reps, const std::string& dump) {
  const int64_t N = c.seqlens.empty() ? c.B : static_cast<int64_t>(c.seqlens.size());
  const int64_t row = c.D + c.row_pad, nq = c.B * c.T * c.H * row, nv = c.B * c.T * c.HV * row, ng = c.B * c.T * c.HV;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit;
  std::vector<uint16_t> q(nq), k(nq), v(nv), beta(ng);
  std::vector<float> g(ng);
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = to16(normal(rng), c.dt);
  for (auto& e : g) e = -0.1f * unit(rng);
  for (auto& e : beta) e = to16(0.5f + 0.5f * unit(rng), c.dt);
  void *dq, *dk, *dv, *o, *gd, *bd, *ht, *ws = nullptr, *cu = nullptr;
  cudaMalloc(&dq, nq * 2);
  cudaMalloc(&dk, nq * 2);
  cudaMalloc(&dv, nv * 2);
  cudaMalloc(&o, nv * 2);
  cudaMemset(o, 0xff, nv * 2);  // NaN: unwritten outputs show
  cudaMalloc(&gd, ng * 4);
  cudaMalloc(&bd, ng * 2);
  cudaMalloc(&ht, N * c.HV * c.D * c.D * 4);
  cudaMemcpy(dq, q.data(), nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v.data(), nv * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(gd, g.data(), ng * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(bd, beta.data(), ng * 2, cudaMemcpyHostToDevice);
  const Device dev = Device::cuda(0);
  GdnFwdParams p;
  p.in.q = rows_view(dq, c, c.H);
  p.in.k = rows_view(dk, c, c.H);
  p.in.v = rows_view(dv, c, c.HV);
  p.in.g = TensorView::contiguous(gd, DType::kFloat32, dev, {c.B, c.T, c.HV});
  p.in.beta = TensorView::contiguous(bd, c.dt, dev, {c.B, c.T, c.HV});
  p.in.use_qk_l2norm = true;
  if (!c.seqlens.empty()) {
    std::vector<int64_t> offsets = {0};
    for (int64_t l : c.seqlens) offsets.push_back(offsets.back() + l);
    cudaMalloc(&cu, offsets.size() * 8);
    cudaMemcpy(cu, offsets.data(), offsets.size() * 8, cudaMemcpyHostToDevice);
    p.in.cu_seqlens = TensorView::contiguous(cu, DType::kInt64, dev, {static_cast<int64_t>(offsets.size())});
  }
  p.out = rows_view(o, c, c.HV);
  p.final_state = TensorView::contiguous(ht, DType::kFloat32, dev, {N, c.HV, c.D, c.D});
  if (const char* seg = std::getenv("PROBE_SEGMENTS")) p.num_segments = std::atoi(seg);  // the sequence split
  const size_t ws_bytes = cuda::gdn_forward_workspace_size(p);
  cudaMalloc(&ws, ws_bytes);
  p.workspace = {ws, ws_bytes};

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int r = 0; r < reps + 2; ++r) {
    cudaEventRecord(start);
    const Status st = cuda::gdn_forward(p);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    if (!st.ok()) {
      std::fprintf(stderr, "gdn_forward: %s\n", st.message().c_str());
      std::exit(1);
    }
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    if (r >= 2) ms.push_back(t);
  }
  if (const cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
    std::fprintf(stderr, "%s\n", cudaGetErrorString(err));
    std::exit(1);
  }
  if (!dump.empty()) {
    std::vector<uint16_t> out(nv);
    std::vector<float> state(N * c.HV * c.D * c.D);
    cudaMemcpy(out.data(), o, nv * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(state.data(), ht, state.size() * 4, cudaMemcpyDeviceToHost);
    std::FILE* f = std::fopen((dump + ".o").c_str(), "wb");
    for (int64_t r = 0; r < nv / row; ++r) std::fwrite(out.data() + r * row, 2, c.D, f);  // without the padding
    std::fclose(f);
    f = std::fopen((dump + ".ht").c_str(), "wb");
    std::fwrite(state.data(), 4, state.size(), f);
    std::fclose(f);
    print_error_vs_float64(c, q, k, v, g, beta, out, state);
  }
  for (void* ptr : {dq, dk, dv, o, gd, bd, ht, ws, cu}) cudaFree(ptr);
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0.0 : ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "check") {
    std::vector<Case> cases(7);
    cases[0] = {DType::kBFloat16, 128, 2, 1000, 4, 4};
    cases[1] = {DType::kFloat16, 64, 1, 777, 2, 4};
    cases[2] = {DType::kBFloat16, 128, 1, 0, 2, 4, {1, 0, 130, 64, 300, 63}};
    cases[3] = {DType::kBFloat16, 64, 1, 0, 1, 2, {65, 1, 200}};
    cases[4] = {DType::kFloat16, 128, 1, 200, 2, 2, {}, 4};
    // >= 96 recurrence CTAs: w and u formed in the recurrence kernel (chunk_fwd_wu.cuh)
    cases[5] = {DType::kBFloat16, 128, 1, 0, 16, 64, {1, 0, 130, 64, 300, 63}};
    cases[6] = {DType::kFloat16, 128, 2, 200, 48, 48};
    for (auto& c : cases)
      for (int64_t l : c.seqlens) c.T += l;
    for (size_t i = 0; i < cases.size(); ++i) run_case(cases[i], 1, std::string(argv[2]) + "." + std::to_string(i));
    std::printf("check: %zu cases dumped to %s.*\n", cases.size(), argv[2]);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "varlen") {  // varlen NSEQ T H [reps [asc|desc]]
    if (argc < 5) {
      std::fprintf(stderr, "usage: gdn_chunk_probe varlen NSEQ T H [reps [asc|desc]]\n");
      return 2;
    }
    Case c;
    const int64_t nseq = std::atoll(argv[2]);
    c.T = std::atoll(argv[3]);
    c.H = c.HV = std::atoll(argv[4]);
    if (nseq < 1 || nseq > c.T || c.H < 1) {
      std::fprintf(stderr, "varlen: expected 1 <= NSEQ <= T and H >= 1, got NSEQ %lld, T %lld, H %lld\n", (long long)nseq,
                   (long long)c.T, (long long)c.H);
      return 2;
    }
    std::mt19937 rng(1);
    std::vector<int64_t> cuts;
    for (int64_t i = 1; i < c.T; ++i) cuts.push_back(i);
    std::shuffle(cuts.begin(), cuts.end(), rng);
    cuts.resize(nseq - 1);
    std::sort(cuts.begin(), cuts.end());
    int64_t prev = 0;
    for (int64_t x : cuts) c.seqlens.push_back(x - prev), prev = x;
    c.seqlens.push_back(c.T - prev);
    const std::string order = argc > 6 ? argv[6] : "";
    if (order == "desc") std::sort(c.seqlens.rbegin(), c.seqlens.rend());
    if (order == "asc") std::sort(c.seqlens.begin(), c.seqlens.end());
    const int reps = argc > 5 ? std::atoi(argv[5]) : 20;
    const double ms = run_case(c, reps, "");
    std::printf("varlen %lld seqs T%lld H%lld K=V=128 bf16: %.4f ms (median of %d)\n", (long long)nseq, (long long)c.T,
                (long long)c.H, ms, reps);
    return 0;
  }
  Case c;
  c.B = argc > 1 ? std::atoll(argv[1]) : 4;
  c.T = argc > 2 ? std::atoll(argv[2]) : 8192;
  c.H = c.HV = argc > 3 ? std::atoll(argv[3]) : 16;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 20;
  const double ms = run_case(c, reps, argc > 5 ? argv[5] : "");
  std::printf("B%lld T%lld H%lld K=V=128 bf16: %.4f ms (median of %d)\n", (long long)c.B, (long long)c.T, (long long)c.H, ms,
              reps);
  return 0;
}
