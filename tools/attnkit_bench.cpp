// tools/attnkit_bench.cpp — runs every attnkit op at a small default size and prints a table.
// Without a GPU it runs the CPU reference backend and says so; the GPU columns (and the peers)
// arrive with the kernel issues. Timings are medians of --reps runs (wall clock).
//
//   attnkit-bench [--reps N] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "attnkit/cpu/io.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace {
using namespace attnkit;

// An owning contiguous host tensor filled with N(0, sd) (or a constant).
struct Buffer {
  std::vector<unsigned char> bytes;
  TensorView view;
  Buffer(DType dt, std::initializer_list<int64_t> shape, std::mt19937* rng = nullptr, double sd = 1.0, double mean = 0.0) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    bytes.resize(static_cast<size_t>(n) * dtype_size(dt));
    view = TensorView::contiguous(bytes.data(), dt, Device::cpu(), shape);
    std::normal_distribution<double> d(mean, sd);
    for (int64_t i = 0; i < n; ++i) cpu::store<double>(view.data, dt, i, rng ? d(*rng) : mean);
  }
};

struct Row {
  std::string op, shape;
  double ms = 0;
  std::string throughput;
};

double median_ms(int reps, const std::function<Status()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    const Status st = fn();
    const auto b = std::chrono::steady_clock::now();
    if (!st.ok()) {
      std::fprintf(stderr, "attnkit-bench: %s\n", st.message().c_str());
      std::exit(1);
    }
    t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void bench_attention(int reps, std::vector<Row>& rows) {
  const int64_t B = 1, S = 512, H = 8, D = 64;
  std::mt19937 rng(0);
  Buffer q(DType::kBFloat16, {B, S, H, D}, &rng), k(DType::kBFloat16, {B, S, H, D}, &rng), v(DType::kBFloat16, {B, S, H, D}, &rng);
  Buffer out(DType::kBFloat16, {B, S, H, D}), lse(DType::kFloat32, {B, H, S}), dout(DType::kBFloat16, {B, S, H, D}, &rng);
  Buffer dq(DType::kBFloat16, {B, S, H, D}), dk(DType::kBFloat16, {B, S, H, D}), dv(DType::kBFloat16, {B, S, H, D});
  AttentionFwdParams f;
  f.q = q.view;
  f.k = k.view;
  f.v = v.view;
  f.out = out.view;
  f.lse = lse.view;
  f.mask.causal = true;
  const double flops = 4.0 * B * H * S * S * D * 0.5;
  const std::string shape = "B1 S512 H8 D64 causal bf16";
  double ms = median_ms(reps, [&] { return attention_forward(f); });
  rows.push_back({"attention fwd", shape, ms, fmt("%.2f GFLOP/s", flops / ms / 1e6)});
  AttentionBwdParams b;
  b.q = q.view;
  b.k = k.view;
  b.v = v.view;
  b.out = out.view;
  b.lse = lse.view;
  b.dout = dout.view;
  b.dq = dq.view;
  b.dk = dk.view;
  b.dv = dv.view;
  b.mask.causal = true;
  ms = median_ms(reps, [&] { return attention_backward(b); });
  rows.push_back({"attention bwd", shape, ms, fmt("%.2f GFLOP/s", 2.5 * flops / ms / 1e6)});

  // Flex: ALiBi + causal on the same data seen as [B, H, S, D].
  std::vector<float> slopes(H);
  for (int64_t h = 0; h < H; ++h) slopes[h] = std::exp2(-8.0f * (h + 1) / H);
  FlexFwdParams ff;
  ff.q = q.view.transposed(1, 2);
  ff.k = k.view.transposed(1, 2);
  ff.v = v.view.transposed(1, 2);
  ff.out = out.view.transposed(1, 2);
  ff.lse = lse.view;
  ff.mods.causal = true;
  ff.mods.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat32, Device::cpu(), {H});
  ms = median_ms(reps, [&] { return flex_attention_forward(ff); });
  rows.push_back({"flex fwd (alibi+causal)", shape, ms, fmt("%.2f GFLOP/s", flops / ms / 1e6)});
  FlexBwdParams fb;
  fb.q = ff.q;
  fb.k = ff.k;
  fb.v = ff.v;
  fb.out = ff.out;
  fb.lse = lse.view;
  fb.dout = dout.view.transposed(1, 2);
  fb.dq = dq.view.transposed(1, 2);
  fb.dk = dk.view.transposed(1, 2);
  fb.dv = dv.view.transposed(1, 2);
  fb.mods = ff.mods;
  ms = median_ms(reps, [&] { return flex_attention_backward(fb); });
  rows.push_back({"flex bwd (alibi+causal)", shape, ms, fmt("%.2f GFLOP/s", 2.5 * flops / ms / 1e6)});
}

#if defined(ATTNKIT_WITH_CUDA)
// Median milliseconds of `fn` on the current stream, timed with CUDA events (3 warm-up runs).
template <class Fn>
double median_event_ms(int reps, Fn&& fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> t;
  for (int r = 0; r < reps + 3; ++r) {
    cudaEventRecord(a);
    const Status st = fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    if (!st.ok()) {
      std::fprintf(stderr, "attnkit-bench: %s\n", st.message().c_str());
      std::exit(1);
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (r >= 3) t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The GPU column: the gated delta rule chunked forward at issue 5's main shape (peers:
// bench/bench_gdn_chunk.py).
void bench_gdn_gpu(int reps, std::vector<Row>& rows) {
  const int64_t B = 4, T = 8192, H = 16, D = 128, n = B * T * H * D, ng = B * T * H;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<uint16_t> x(static_cast<size_t>(n)), beta(static_cast<size_t>(ng));
  std::vector<float> g(static_cast<size_t>(ng));
  for (auto& e : x) e = float_to_bf16_bits(d(rng));
  for (auto& e : g) e = -0.5f * std::fabs(d(rng));  // log-decay <= 0
  for (auto& e : beta) e = float_to_bf16_bits(0.5f + 0.4f * std::tanh(d(rng)));
  void *q, *k, *v, *o, *gd, *bd, *ht;
  for (void** p : {&q, &k, &v, &o}) cudaMalloc(p, n * 2);
  cudaMalloc(&gd, ng * 4);
  cudaMalloc(&bd, ng * 2);
  cudaMalloc(&ht, B * H * D * D * 4);
  for (void* p : {q, k, v}) cudaMemcpy(p, x.data(), n * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(gd, g.data(), ng * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(bd, beta.data(), ng * 2, cudaMemcpyHostToDevice);
  const Device dev = Device::cuda(0);
  GdnFwdParams p;
  p.in.q = TensorView::contiguous(q, DType::kBFloat16, dev, {B, T, H, D});
  p.in.k = TensorView::contiguous(k, DType::kBFloat16, dev, {B, T, H, D});
  p.in.v = TensorView::contiguous(v, DType::kBFloat16, dev, {B, T, H, D});
  p.in.g = TensorView::contiguous(gd, DType::kFloat32, dev, {B, T, H});
  p.in.beta = TensorView::contiguous(bd, DType::kBFloat16, dev, {B, T, H});
  p.in.use_qk_l2norm = true;
  p.out = TensorView::contiguous(o, DType::kBFloat16, dev, {B, T, H, D});
  p.final_state = TensorView::contiguous(ht, DType::kFloat32, dev, {B, H, D, D});
  void* ws = nullptr;
  const size_t ws_bytes = gdn_forward_workspace_size(p);
  cudaMalloc(&ws, ws_bytes);
  p.workspace = {ws, ws_bytes};
  const double ms = median_event_ms(reps, [&] { return gdn_forward(p); });
  rows.push_back({"gdn chunk fwd [gpu]", "B4 T8192 H16 K=V=128 bf16", ms, fmt("%.3f Mtok/s", B * T / ms / 1e3)});

  // The whole chunked backward at the same shape (do = the forward's output; no state gradients).
  void *dq, *dk, *dvv, *dgd, *dbd, *bws;
  for (void** ptr : {&dq, &dk, &dvv}) cudaMalloc(ptr, n * 2);
  cudaMalloc(&dgd, ng * 4);
  cudaMalloc(&dbd, ng * 2);
  GdnBwdParams b;
  b.in = p.in;
  b.dout = p.out;
  b.dq = TensorView::contiguous(dq, DType::kBFloat16, dev, {B, T, H, D});
  b.dk = TensorView::contiguous(dk, DType::kBFloat16, dev, {B, T, H, D});
  b.dv = TensorView::contiguous(dvv, DType::kBFloat16, dev, {B, T, H, D});
  b.dg = TensorView::contiguous(dgd, DType::kFloat32, dev, {B, T, H});
  b.dbeta = TensorView::contiguous(dbd, DType::kBFloat16, dev, {B, T, H});
  const size_t bws_bytes = gdn_backward_workspace_size(b);
  cudaMalloc(&bws, bws_bytes);
  b.workspace = {bws, bws_bytes};
  const double ms_bwd = median_event_ms(reps, [&] { return gdn_backward(b); });
  rows.push_back({"gdn chunk bwd [gpu]", "B4 T8192 H16 K=V=128 bf16", ms_bwd, fmt("%.3f Mtok/s", B * T / ms_bwd / 1e3)});

  // A training forward keeping its intermediates (all, then T alone: GdnKeep::kT), and the
  // backward reading them (no rerun; with T alone, the rerun's w and u from T).
  std::vector<void*> kept_buffers;
  auto device_buffer = [&](size_t bytes) {
    void* ptr = nullptr;
    cudaMalloc(&ptr, bytes);
    kept_buffers.push_back(ptr);
    return Workspace{ptr, bytes};
  };
  for (GdnKeep keep : {GdnKeep::kAll, GdnKeep::kT}) {
    const std::string what = keep == GdnKeep::kAll ? "kept" : "T kept";
    GdnFwdParams pk = p;
    pk.keep = keep;
    pk.intermediates = device_buffer(gdn_intermediates_size(p.in, keep));
    pk.workspace = device_buffer(gdn_forward_workspace_size(pk));
    const double ms_fk = median_event_ms(reps, [&] { return gdn_forward(pk); });
    rows.push_back({"gdn chunk fwd, " + what + " [gpu]", "B4 T8192 H16 K=V=128 bf16", ms_fk,
                    fmt("%.3f Mtok/s", B * T / ms_fk / 1e3) + fmt(", keeps %.0f MB", pk.intermediates.bytes / 1e6)});
    GdnBwdParams bk = b;
    bk.keep = keep;
    bk.intermediates = pk.intermediates;
    bk.workspace = device_buffer(gdn_backward_workspace_size(bk));
    const double ms_bk = median_event_ms(reps, [&] { return gdn_backward(bk); });
    rows.push_back({"gdn chunk bwd, " + what + " [gpu]", "B4 T8192 H16 K=V=128 bf16", ms_bk, fmt("%.3f Mtok/s", B * T / ms_bk / 1e3)});
  }
  for (void* ptr : {dq, dk, dvv, dgd, dbd, bws}) cudaFree(ptr);
  for (void* ptr : kept_buffers) cudaFree(ptr);

  // bwd_dhu at issue 6's first shape (B2 T8192 H16, no gate and scalar gate) on the first two sequences'
  // rows: w and dv from v, do from o (values do not change the kernel's time).
  const int64_t Bd = 2, nt = T / 64;
  void *dh, *dv2;
  cudaMalloc(&dh, Bd * nt * H * D * D * 2);
  cudaMalloc(&dv2, Bd * T * H * D * 2);
  cudaMemcpy(o, x.data(), n * 2, cudaMemcpyHostToDevice);
  GdnBwdDhuParams u;
  u.q = TensorView::contiguous(q, DType::kBFloat16, dev, {Bd, T, H, D});
  u.k = TensorView::contiguous(k, DType::kBFloat16, dev, {Bd, T, H, D});
  u.w = TensorView::contiguous(v, DType::kBFloat16, dev, {Bd, T, H, D});
  u.dout = TensorView::contiguous(o, DType::kBFloat16, dev, {Bd, T, H, D});
  u.dv = TensorView::contiguous(v, DType::kBFloat16, dev, {Bd, T, H, D});
  u.g = TensorView::contiguous(gd, DType::kFloat32, dev, {Bd, T, H});
  u.dh = TensorView::contiguous(dh, DType::kBFloat16, dev, {Bd, nt, H, D, D});
  u.dv2 = TensorView::contiguous(dv2, DType::kBFloat16, dev, {Bd, T, H, D});
  // Issue 6's no-gate case first: its warm-up is the program's first 32-column bwd_dhu launch (ncu
  // --kernel-name-base mangled -k 'regex:gdn_bwd_dhu_kernel.*Li128ELi32E' -c 1 profiles it).
  void* dhu_ws = nullptr;  // none at this shape (no split); sized by the op all the same
  const size_t dhu_ws_bytes = gdn_bwd_dhu_workspace_size(u);
  if (dhu_ws_bytes) cudaMalloc(&dhu_ws, dhu_ws_bytes);
  u.workspace = {dhu_ws, dhu_ws_bytes};
  GdnBwdDhuParams u_none = u;
  u_none.g = TensorView{};
  const double ms_dhu_none = median_event_ms(reps, [&] { return gdn_bwd_dhu(u_none); });
  rows.push_back({"gdn bwd_dhu [gpu]", "B2 T8192 H16 K=V=128 bf16, no gate", ms_dhu_none,
                  fmt("%.3f Mtok/s", Bd * T / ms_dhu_none / 1e3)});
  const double ms_dhu = median_event_ms(reps, [&] { return gdn_bwd_dhu(u); });
  rows.push_back({"gdn bwd_dhu [gpu]", "B2 T8192 H16 K=V=128 bf16, g", ms_dhu, fmt("%.3f Mtok/s", Bd * T / ms_dhu / 1e3)});
  for (void* ptr : {q, k, v, o, gd, bd, ht, ws, dh, dv2, dhu_ws}) cudaFree(ptr);
}

// The GPU column: softmax attention forward and backward on device buffers.
void bench_attention_gpu(int reps, std::vector<Row>& rows) {
  struct Shape {
    int64_t B, S, H, D;
    bool causal;
  };
  for (Shape sh : {Shape{8, 2048, 16, 128, false}, Shape{8, 2048, 16, 128, true}, Shape{2, 8192, 16, 128, true}}) {
    const int64_t n = sh.B * sh.S * sh.H * sh.D;
    std::vector<void*> bufs(8);  // q k v o do dq dk dv
    for (void*& p : bufs) cudaMalloc(&p, n * 2);
    void* lse;
    cudaMalloc(&lse, sh.B * sh.H * sh.S * 4);
    std::vector<uint16_t> host(static_cast<size_t>(n));
    std::mt19937 rng(2);
    std::normal_distribution<float> d(0.f, 1.f);
    for (auto& x : host) x = float_to_bf16_bits(d(rng));
    for (int i : {0, 1, 2, 4}) cudaMemcpy(bufs[i], host.data(), n * 2, cudaMemcpyHostToDevice);
    const Device dev = Device::cuda(0);
    auto view = [&](int i) { return TensorView::contiguous(bufs[i], DType::kBFloat16, dev, {sh.B, sh.S, sh.H, sh.D}); };
    AttentionFwdParams p;
    p.q = view(0);
    p.k = view(1);
    p.v = view(2);
    p.out = view(3);
    p.lse = TensorView::contiguous(lse, DType::kFloat32, dev, {sh.B, sh.H, sh.S});
    p.mask.causal = sh.causal;
    AttentionBwdParams g;
    g.q = p.q;
    g.k = p.k;
    g.v = p.v;
    g.out = p.out;
    g.lse = p.lse;
    g.dout = view(4);
    g.dq = view(5);
    g.dk = view(6);
    g.dv = view(7);
    g.mask = p.mask;
    const size_t ws_bytes = std::max(attention_forward_workspace_size(p), attention_backward_workspace_size(g));
    void* ws;
    cudaMalloc(&ws, ws_bytes);
    p.workspace = {ws, ws_bytes};
    g.workspace = {ws, ws_bytes};
    const double fwd_ms = median_event_ms(reps, [&] { return attention_forward(p); });
    const double bwd_ms = median_event_ms(reps, [&] { return attention_backward(g); });
    const double flops = 4.0 * sh.B * sh.H * sh.S * sh.S * sh.D * (sh.causal ? 0.5 : 1.0);
    char shape[64];
    std::snprintf(shape, sizeof shape, "B%lld S%lld H%lld D%lld%s bf16", (long long)sh.B, (long long)sh.S, (long long)sh.H,
                  (long long)sh.D, sh.causal ? " causal" : "");
    rows.push_back({"attention fwd [gpu]", shape, fwd_ms, fmt("%.1f TFLOP/s", flops / fwd_ms / 1e9)});
    rows.push_back({"attention bwd [gpu]", shape, bwd_ms, fmt("%.1f TFLOP/s", 2.5 * flops / bwd_ms / 1e9)});
    for (void* ptr : bufs) cudaFree(ptr);
    cudaFree(lse);
    cudaFree(ws);
  }
}

// The GPU column: flex attention forward and backward — causal through a BlockMask at PEERS.md's
// flex shape (peers: bench/bench_flex.py), and a decode step on the split-KV path.
void bench_flex_gpu(int reps, std::vector<Row>& rows) {
  const Device dev = Device::cuda(0);
  auto device_copy = [](const std::vector<int32_t>& h) {
    void* p;
    cudaMalloc(&p, h.size() * 4);
    cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    return p;
  };
  {
    const int64_t B = 1, H = 16, S = 16384, D = 128, n = B * H * S * D, nb = S / 128;
    std::vector<void*> bufs(8);  // q k v o dout dq dk dv
    for (void*& p : bufs) cudaMalloc(&p, n * 2);
    void* lse;
    cudaMalloc(&lse, B * H * S * 4);
    std::vector<uint16_t> host(static_cast<size_t>(n));
    std::mt19937 rng(4);
    std::normal_distribution<float> d(0.f, 1.f);
    for (auto& x : host) x = float_to_bf16_bits(d(rng));
    for (int i : {0, 1, 2, 4}) cudaMemcpy(bufs[i], host.data(), n * 2, cudaMemcpyHostToDevice);
    // Causal BlockMask, 128 x 128 blocks: row r lists block r as partial and blocks < r as full.
    std::vector<int32_t> num(nb), idx(nb * nb, 0), full_num(nb), full_idx(nb * nb, 0);
    for (int64_t r = 0; r < nb; ++r) {
      num[r] = 1;
      idx[r * nb] = static_cast<int32_t>(r);
      full_num[r] = static_cast<int32_t>(r);
      for (int64_t c = 0; c < r; ++c) full_idx[r * nb + c] = static_cast<int32_t>(c);
    }
    std::vector<void*> mask = {device_copy(num), device_copy(idx), device_copy(full_num), device_copy(full_idx)};
    FlexFwdParams p;
    auto view = [&](int i) { return TensorView::contiguous(bufs[i], DType::kBFloat16, dev, {B, H, S, D}); };
    p.q = view(0);
    p.k = view(1);
    p.v = view(2);
    p.out = view(3);
    p.lse = TensorView::contiguous(lse, DType::kFloat32, dev, {B, H, S});
    p.mods.causal = true;
    p.block_mask.kv_num_blocks = TensorView::contiguous(mask[0], DType::kInt32, dev, {1, 1, nb});
    p.block_mask.kv_indices = TensorView::contiguous(mask[1], DType::kInt32, dev, {1, 1, nb, nb});
    p.block_mask.full_kv_num_blocks = TensorView::contiguous(mask[2], DType::kInt32, dev, {1, 1, nb});
    p.block_mask.full_kv_indices = TensorView::contiguous(mask[3], DType::kInt32, dev, {1, 1, nb, nb});
    void* ws;
    const size_t ws_bytes = flex_forward_workspace_size(p);
    cudaMalloc(&ws, ws_bytes);
    p.workspace = {ws, ws_bytes};
    const double ms = median_event_ms(reps, [&] { return flex_attention_forward(p); });
    const double flops = 4.0 * B * H * S * D * (S / 2.0 + 64);  // visited blocks: the lower triangle + diagonal
    rows.push_back({"flex fwd causal [gpu]", "B1 S16384 H16 D128 BlockMask bf16", ms, fmt("%.1f TFLOP/s", flops / ms / 1e9)});
    FlexBwdParams g;
    g.q = p.q;
    g.k = p.k;
    g.v = p.v;
    g.out = p.out;
    g.lse = p.lse;
    g.dout = view(4);
    g.dq = view(5);
    g.dk = view(6);
    g.dv = view(7);
    g.mods = p.mods;
    g.block_mask = p.block_mask;
    void* gws;
    const size_t gws_bytes = flex_backward_workspace_size(g);
    cudaMalloc(&gws, gws_bytes);
    g.workspace = {gws, gws_bytes};
    const double bwd_ms = median_event_ms(reps, [&] { return flex_attention_backward(g); });
    rows.push_back({"flex bwd causal [gpu]", "B1 S16384 H16 D128 BlockMask bf16", bwd_ms,
                    fmt("%.1f TFLOP/s", 2.5 * flops / bwd_ms / 1e9)});
    for (void* ptr : bufs) cudaFree(ptr);
    for (void* ptr : mask) cudaFree(ptr);
    for (void* ptr : {ws, gws, lse}) cudaFree(ptr);
  }
  {
    const int64_t B = 4, H = 16, Sk = 32768, D = 128, nkv = B * H * Sk * D;
    void *q, *k, *v, *o, *ws;
    cudaMalloc(&q, B * H * D * 2);
    cudaMalloc(&o, B * H * D * 2);
    cudaMalloc(&k, nkv * 2);
    cudaMalloc(&v, nkv * 2);
    cudaMemset(q, 0, B * H * D * 2);
    cudaMemset(k, 0, nkv * 2);
    cudaMemset(v, 0, nkv * 2);
    FlexFwdParams p;
    p.q = TensorView::contiguous(q, DType::kBFloat16, dev, {B, H, 1, D});
    p.k = TensorView::contiguous(k, DType::kBFloat16, dev, {B, H, Sk, D});
    p.v = TensorView::contiguous(v, DType::kBFloat16, dev, {B, H, Sk, D});
    p.out = TensorView::contiguous(o, DType::kBFloat16, dev, {B, H, 1, D});
    const size_t ws_bytes = flex_forward_workspace_size(p);  // the split-KV parts
    cudaMalloc(&ws, ws_bytes);
    p.workspace = {ws, ws_bytes};
    const double ms = median_event_ms(reps, [&] { return flex_attention_forward(p); });
    rows.push_back({"flex decode [gpu]", "B4 H16 Sq1 Sk32768 D128 bf16", ms, fmt("%.0f GB/s of K+V", 2.0 * nkv * 2 / ms / 1e6)});
    for (void* ptr : {q, k, v, o, ws}) cudaFree(ptr);
  }
}
#endif

void bench_gdn(int reps, std::vector<Row>& rows) {
  const int64_t B = 1, T = 1024, H = 4, K = 64, V = 64;
  std::mt19937 rng(1);
  Buffer q(DType::kBFloat16, {B, T, H, K}, &rng), k(DType::kBFloat16, {B, T, H, K}, &rng), v(DType::kBFloat16, {B, T, H, V}, &rng);
  Buffer g(DType::kFloat32, {B, T, H}, &rng, 0.1, -0.3), beta(DType::kBFloat16, {B, T, H}, &rng, 0.1, 0.5);
  Buffer out(DType::kBFloat16, {B, T, H, V}), ht(DType::kFloat32, {B, H, K, V}), dout(DType::kBFloat16, {B, T, H, V}, &rng);
  GdnFwdParams f;
  f.in.q = q.view;
  f.in.k = k.view;
  f.in.v = v.view;
  f.in.g = g.view;
  f.in.beta = beta.view;
  f.in.use_qk_l2norm = true;
  f.out = out.view;
  f.final_state = ht.view;
  const std::string shape = "B1 T1024 H4 K=V=64 bf16";
  double ms = median_ms(reps, [&] { return gdn_forward(f); });
  rows.push_back({"gdn chunk fwd", shape, ms, fmt("%.3f Mtok/s", B * T / ms / 1e3)});
  Buffer dq(DType::kBFloat16, {B, T, H, K}), dk(DType::kBFloat16, {B, T, H, K}), dv(DType::kBFloat16, {B, T, H, V});
  Buffer dg(DType::kFloat32, {B, T, H}), dbeta(DType::kBFloat16, {B, T, H});
  GdnBwdParams b;
  b.in = f.in;
  b.dout = dout.view;
  b.dq = dq.view;
  b.dk = dk.view;
  b.dv = dv.view;
  b.dg = dg.view;
  b.dbeta = dbeta.view;
  ms = median_ms(reps, [&] { return gdn_backward(b); });
  rows.push_back({"gdn chunk bwd", shape, ms, fmt("%.3f Mtok/s", B * T / ms / 1e3)});

  const int64_t N = 16, HV = 8;
  Buffer dq1(DType::kBFloat16, {N, 1, HV, K}, &rng), dk1(DType::kBFloat16, {N, 1, HV, K}, &rng), dv1(DType::kBFloat16, {N, 1, HV, V}, &rng);
  Buffer dg1(DType::kFloat32, {N, 1, HV}, &rng, 0.1, -0.3), db1(DType::kBFloat16, {N, 1, HV}, &rng, 0.1, 0.5);
  Buffer state(DType::kFloat32, {N, HV, K, V}), o1(DType::kBFloat16, {N, 1, HV, V});
  GdnDecodeParams d;
  d.q = dq1.view;
  d.k = dk1.view;
  d.v = dv1.view;
  d.g = dg1.view;
  d.beta = db1.view;
  d.state = state.view;
  d.out = o1.view;
  d.use_qk_l2norm = true;
  ms = median_ms(reps, [&] { return gdn_decode(d); });
  const double bytes = 2.0 * N * HV * K * V * 4;
  rows.push_back({"gdn decode (1 token)", "N16 HV8 K=V=64 fp32 state", ms, fmt("%.2f GB/s state", bytes / ms / 1e6)});
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  const char* json = nullptr;
  bool gpu_only = false;  // skip the CPU rows (profiling the GPU kernels under ncu)
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--gpu-only")) gpu_only = true;
    else {
      std::fprintf(stderr, "usage: attnkit-bench [--reps N] [--json FILE] [--gpu-only]\n");
      return 2;
    }
  }
  const bool gpu = attnkit::cuda_available();
  if (gpu)
    std::printf("GPU found: the attention forward and backward, flex forward and backward and the GDN chunked forward run on it\n"
                "(rows marked [gpu]); "
                "the other rows run on the CPU "
                "reference backend until their kernels land. Peers: python3 bench/bench_attention.py.\n\n");
  else
    std::printf("No GPU found: running the CPU reference backend (attnkit %s).\n\n", attnkit::version());
  std::vector<Row> rows;
#if defined(ATTNKIT_WITH_CUDA)
  if (gpu) {
    bench_attention_gpu(std::max(reps, 20), rows);
    bench_gdn_gpu(std::max(reps, 20), rows);
    bench_flex_gpu(std::max(reps, 20), rows);
  }
#endif
  if (!gpu_only) {
    bench_attention(reps, rows);
    bench_gdn(reps, rows);
  }
  std::printf("%-26s %-30s %-8s %12s  %s\n", "op", "shape", "backend", "median ms", "throughput");
  for (const Row& r : rows) {
    const bool on_gpu = r.op.find("[gpu]") != std::string::npos;
    std::printf("%-26s %-30s %-8s %12.3f  %s\n", r.op.c_str(), r.shape.c_str(), on_gpu ? "cuda" : "cpu", r.ms, r.throughput.c_str());
  }
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f) {
      std::fprintf(stderr, "attnkit-bench: cannot write %s\n", json);
      return 1;
    }
    for (const Row& r : rows)
      std::fprintf(f, "{\"op\": \"%s\", \"shape\": \"%s\", \"backend\": \"%s\", \"median_ms\": %.6f, \"throughput\": \"%s\"}\n",
                   r.op.c_str(), r.shape.c_str(), r.op.find("[gpu]") != std::string::npos ? "cuda" : "cpu", r.ms,
                   r.throughput.c_str());
    std::fclose(f);
  }
  return 0;
}
