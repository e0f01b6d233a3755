// bench/gdn_chunk_bwd_probe.cu — the CUDA chunked GDN backward alone, for quick looks on the
// device: builds from its own translation units in a few minutes (PROBE=bwd bench/gdn_chunk_probe.sh),
// times the backward with events (median; and the host's time to issue it) and gives ncu a short
// process to profile. The forward runs once beforehand to fill the intermediates when they are kept.
//
//   gdn_chunk_bwd_probe B T H [reps [kept|t]] K = V = 128, bf16, l2norm, scalar gate, h0, dht;
//                                             kept: the forward's intermediates handed to the
//                                             backward (else it reruns the forward's kernels);
//                                             t: T alone kept (GdnKeep::kT);
//                                             PROBE_SEGMENTS: num_segments of both (the split);
//                                             PROBE_SEQS=N (B = 1): a packed batch of N sequences
//                                             of random lengths summing to T (issue 6's varlen
//                                             case: 1 8192 64 with N = 20; its own draw, not
//                                             bench_gdn_chunk.py's lengths); PROBE_SEQ_ORDER=
//                                             desc / asc: the same lengths, longest / shortest
//                                             first (what a longest-first CTA order would gain
//                                             on the chain kernels' last wave); PROBE_NO_L2NORM=1:
//                                             without the in-op l2norm
//   gdn_chunk_bwd_probe check PREFIX          a set of small cases (dtypes, K 64/128, tails, varlen
//                                             with empty and 1-token sequences, GVA, several items
//                                             per persistent CTA (1024 items in one); rerun and
//                                             kept, then T kept; do's rows misaligned, for the copy paths), each one's
//                                             gradients dumped as float32 to PREFIX.<i>.<name>;
//                                             bench/gdn_chunk_bwd_probe_cmp.py compares two builds
// Not a test: the GPU tests (tests/cpp/gdn_chunk_bwd_gpu_test.cpp) check against the CPU backend.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
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
  bool kept = false;             // the forward's intermediates handed to the backward
  bool misaligned_dout = false;  // do's rows 2 bytes off 16-byte alignment: the kernels' copy paths
  GdnKeep keep = GdnKeep::kAll;  // with kept: what the forward keeps
};

uint16_t to16(float x, DType dt) { return dt == DType::kFloat16 ? float_to_fp16_bits(x) : float_to_bf16_bits(x); }
float from16(uint16_t x, DType dt) { return dt == DType::kFloat16 ? fp16_bits_to_float(x) : bf16_bits_to_float(x); }

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}
void check(const Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, st.message().c_str());
    std::exit(1);
  }
}

// A device buffer holding `host`'s bytes (or `bytes` of 0xff — NaN in every float type — when
// host is null, so that unwritten outputs show).
void* device_copy(const void* host, size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 256)), "cudaMalloc");
  if (host) check(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  else check(cudaMemset(p, 0xff, bytes), "cudaMemset");
  return p;
}

// Writes `n` elements of the device buffer p (16-bit of dtype dt, or fp32) as float32.
void dump(const std::string& path, const void* p, int64_t n, DType dt) {
  std::vector<float> out(n);
  if (dt == DType::kFloat32) {
    check(cudaMemcpy(out.data(), p, n * 4, cudaMemcpyDeviceToHost), "dump");
  } else {
    std::vector<uint16_t> raw(n);
    check(cudaMemcpy(raw.data(), p, n * 2, cudaMemcpyDeviceToHost), "dump");
    for (int64_t i = 0; i < n; ++i) out[i] = from16(raw[i], dt);
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(out.data(), 4, out.size(), f);
  std::fclose(f);
}

// Median ms of `reps` calls of fn after 2 warm-ups, each timed with events.
template <class Fn>
double median_ms(int reps, Fn&& fn, double* host_ms = nullptr) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<float> ms;
  std::vector<double> host;  // time to issue the call (the GPU drained before it)
  for (int r = 0; r < reps + 2; ++r) {
    check(cudaEventRecord(start), "event");
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    check(cudaEventRecord(stop), "event");
    check(cudaEventSynchronize(stop), "the timed call (asynchronous)");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "event");
    if (r >= 2) ms.push_back(t), host.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  std::sort(host.begin(), host.end());
  if (host_ms) *host_ms = host.empty() ? 0.0 : host[host.size() / 2];
  return ms.empty() ? 0.0 : ms[ms.size() / 2];
}

// Runs the case: median ms of `reps` backward calls after 2 warm-ups (and of the forward that
// fills what it reads, into *fwd_ms when given); with `prefix`, dumps the gradients of the last call.
double run_case(const Case& c, int reps, const std::string& prefix, double* fwd_ms = nullptr, double* host_ms = nullptr) {
  const int64_t N = c.seqlens.empty() ? c.B : static_cast<int64_t>(c.seqlens.size());
  const int64_t nq = c.B * c.T * c.H * c.D, nv = c.B * c.T * c.HV * c.D, ng = c.B * c.T * c.HV, ns = N * c.HV * c.D * c.D;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit;
  std::vector<uint16_t> q(nq), k(nq), v(nv), dout(nv), beta(ng);
  std::vector<float> g(ng), h0(ns), dht(ns);
  for (auto* x : {&q, &k, &v, &dout})
    for (auto& e : *x) e = to16(normal(rng), c.dt);
  for (auto& e : g) e = -0.1f * unit(rng);
  for (auto& e : beta) e = to16(0.5f + 0.5f * unit(rng), c.dt);
  for (auto* x : {&h0, &dht})
    for (auto& e : *x) e = 0.1f * normal(rng);
  const Device dev = Device::cuda(0);
  auto rows = [&](void* p, int64_t heads) { return TensorView::contiguous(p, c.dt, dev, {c.B, c.T, heads, c.D}); };
  auto per_token = [&](void* p, DType dt) { return TensorView::contiguous(p, dt, dev, {c.B, c.T, c.HV}); };
  auto state = [&](void* p) { return TensorView::contiguous(p, DType::kFloat32, dev, {N, c.HV, c.D, c.D}); };
  std::vector<void*> owned;
  auto buf = [&](const void* host, size_t bytes) {
    owned.push_back(device_copy(host, bytes));
    return owned.back();
  };

  GdnInputs in;
  in.q = rows(buf(q.data(), nq * 2), c.H);
  in.k = rows(buf(k.data(), nq * 2), c.H);
  in.v = rows(buf(v.data(), nv * 2), c.HV);
  in.g = per_token(buf(g.data(), ng * 4), DType::kFloat32);
  in.beta = per_token(buf(beta.data(), ng * 2), c.dt);
  in.initial_state = state(buf(h0.data(), ns * 4));
  in.use_qk_l2norm = std::getenv("PROBE_NO_L2NORM") == nullptr;  // timing the path without it
  if (!c.seqlens.empty()) {
    std::vector<int64_t> offsets = {0};
    for (int64_t l : c.seqlens) offsets.push_back(offsets.back() + l);
    in.cu_seqlens = TensorView::contiguous(buf(offsets.data(), offsets.size() * 8), DType::kInt64, dev,
                                           {static_cast<int64_t>(offsets.size())});
  }

  GdnFwdParams f;
  f.in = in;
  const char* seg = std::getenv("PROBE_SEGMENTS");  // the sequence split: 1 none, n forced, unset automatic
  f.num_segments = seg ? std::atoi(seg) : 0;
  f.out = rows(buf(nullptr, nv * 2), c.HV);
  f.final_state = state(buf(nullptr, ns * 4));
  const size_t fws = cuda::gdn_forward_workspace_size(f);
  f.workspace = {buf(nullptr, fws), fws};
  if (c.kept) {
    f.keep = c.keep;
    const size_t bytes = cuda::gdn_intermediates_size(in, c.keep);
    f.intermediates = {buf(nullptr, bytes), bytes};
  }
  check(cuda::gdn_forward(f), "gdn_forward");
  if (fwd_ms) *fwd_ms = median_ms(reps, [&] { check(cuda::gdn_forward(f), "gdn_forward"); });

  GdnBwdParams b;
  b.in = in;
  b.num_segments = f.num_segments;
  if (c.misaligned_dout) {  // the same values one element into a larger buffer
    std::vector<uint16_t> shifted(nv + 1, 0);
    std::copy(dout.begin(), dout.end(), shifted.begin() + 1);
    b.dout = rows(static_cast<uint16_t*>(buf(shifted.data(), (nv + 1) * 2)) + 1, c.HV);
  } else {
    b.dout = rows(buf(dout.data(), nv * 2), c.HV);
  }
  b.dfinal_state = state(buf(dht.data(), ns * 4));
  b.dq = rows(buf(nullptr, nq * 2), c.H);
  b.dk = rows(buf(nullptr, nq * 2), c.H);
  b.dv = rows(buf(nullptr, nv * 2), c.HV);
  b.dbeta = per_token(buf(nullptr, ng * 2), c.dt);
  b.dg = per_token(buf(nullptr, ng * 4), DType::kFloat32);
  b.dinitial_state = state(buf(nullptr, ns * 4));
  b.intermediates = f.intermediates;
  b.keep = f.keep;
  const size_t bws = cuda::gdn_backward_workspace_size(b);
  b.workspace = {buf(nullptr, bws), bws};

  const double ms = median_ms(reps, [&] { check(cuda::gdn_backward(b), "gdn_backward"); }, host_ms);
  if (!prefix.empty()) {
    dump(prefix + ".dq", b.dq.data, nq, c.dt);
    dump(prefix + ".dk", b.dk.data, nq, c.dt);
    dump(prefix + ".dv", b.dv.data, nv, c.dt);
    dump(prefix + ".dbeta", b.dbeta.data, ng, c.dt);
    dump(prefix + ".dg", b.dg.data, ng, DType::kFloat32);
    dump(prefix + ".dh0", b.dinitial_state.data, ns, DType::kFloat32);
    dump(prefix + ".ht", f.final_state.data, ns, DType::kFloat32);  // the forward's
  }
  for (void* p : owned) cudaFree(p);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "check") {
    std::vector<Case> cases;
    for (bool kept : {false, true}) {
      cases.push_back({DType::kBFloat16, 128, 2, 1000, 4, 4, {}, kept});
      cases.push_back({DType::kFloat16, 64, 1, 777, 2, 4, {}, kept});
      cases.push_back({DType::kBFloat16, 128, 1, 0, 2, 4, {1, 0, 130, 64, 300, 63}, kept});
      cases.push_back({DType::kBFloat16, 64, 1, 0, 1, 2, {65, 1, 200}, kept});
      cases.push_back({DType::kBFloat16, 128, 1, 4200, 6, 6, {}, kept});  // ~3 items per persistent CTA
    }
    cases.push_back({DType::kBFloat16, 128, 1, 0, 2, 4, {1, 130, 64, 63}, false, true});  // cp.async copies
    // 1024 items: several a CTA for every persistent kernel (~4 for two CTAs an SM, ~8 for one),
    // so each CTA's stage barriers pass through both phases.
    cases.push_back({DType::kBFloat16, 64, 2, 4096, 8, 8, {}, false});
    // T alone kept (after the others, so that their numbers stay those of older builds).
    for (size_t i = 5; i < 10; ++i) {  // the kept cases again, T alone kept
      Case t = cases[i];
      t.keep = GdnKeep::kT;
      cases.push_back(t);
    }
    cases.push_back({DType::kBFloat16, 128, 1, 0, 2, 4, {1, 130, 64, 63}, true, true, GdnKeep::kT});
    // Enough (sequence, value head) pairs for bwd_dhu's value block of 64, where it works dv_local
    // out itself (BwdDhuTraits::kLocal): dense, varlen, GVA at K = 64, T kept.
    cases.push_back({DType::kBFloat16, 128, 2, 1000, 20, 20, {}, false});
    cases.push_back({DType::kBFloat16, 128, 1, 0, 10, 20, {1, 0, 130, 64, 300, 63}, false});
    cases.push_back({DType::kFloat16, 64, 2, 777, 20, 40, {}, false});
    cases.push_back({DType::kBFloat16, 128, 1, 0, 10, 20, {1, 0, 130, 64, 300, 63}, true, false, GdnKeep::kT});
    for (auto& c : cases)
      for (int64_t l : c.seqlens) c.T += l;
    for (size_t i = 0; i < cases.size(); ++i) run_case(cases[i], 1, std::string(argv[2]) + "." + std::to_string(i));
    std::printf("check: %zu cases dumped to %s.*\n", cases.size(), argv[2]);
    return 0;
  }
  Case c;
  c.B = argc > 1 ? std::atoll(argv[1]) : 4;
  c.T = argc > 2 ? std::atoll(argv[2]) : 8192;
  c.H = c.HV = argc > 3 ? std::atoll(argv[3]) : 16;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 20;
  c.kept = argc > 5 && (std::string(argv[5]) == "kept" || std::string(argv[5]) == "t");
  if (c.kept && std::string(argv[5]) == "t") c.keep = GdnKeep::kT;
  if (const char* seqs = std::getenv("PROBE_SEQS")) {  // N - 1 distinct cut points in 1 .. T - 1
    const int64_t n = std::atoll(seqs);
    if (c.B != 1 || n < 1 || n > c.T) {
      std::fprintf(stderr, "PROBE_SEQS=%lld: needs B = 1 and 1 <= N <= T\n", (long long)n);
      return 1;
    }
    std::vector<int64_t> cuts(c.T - 1);
    for (int64_t i = 0; i < c.T - 1; ++i) cuts[i] = i + 1;
    std::shuffle(cuts.begin(), cuts.end(), std::mt19937(1));
    cuts.resize(n - 1);
    cuts.push_back(c.T);
    std::sort(cuts.begin(), cuts.end());
    int64_t prev = 0;
    for (int64_t cut : cuts) c.seqlens.push_back(cut - prev), prev = cut;
    if (const char* order = std::getenv("PROBE_SEQ_ORDER")) {
      const std::string o = order;
      if (o != "desc" && o != "asc") {
        std::fprintf(stderr, "PROBE_SEQ_ORDER=%s: expected desc or asc\n", order);
        return 1;
      }
      std::sort(c.seqlens.begin(), c.seqlens.end());
      if (o == "desc") std::reverse(c.seqlens.begin(), c.seqlens.end());
    }
  }
  double fwd_ms = 0, host_ms = 0;
  const double ms = run_case(c, reps, "", &fwd_ms, &host_ms);
  std::printf("B%lld T%lld H%lld%s K=V=128 bf16 backward%s: %.4f ms (host %.4f ms to issue it), its forward %.4f ms (medians of %d)\n",
              (long long)c.B, (long long)c.T, (long long)c.H,
              c.seqlens.empty() ? "" : (" varlen " + std::to_string(c.seqlens.size()) + " seqs").c_str(),
              !c.kept ? "" : c.keep == GdnKeep::kT ? " (T kept)" : " (kept intermediates)", ms, host_ms, fwd_ms, reps);
  return 0;
}
