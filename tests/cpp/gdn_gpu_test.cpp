// tests/cpp/gdn_gpu_test.cpp — the CUDA gated delta rule kernels. Decode against the CPU backend
// (itself checked against the float64 token recurrence in gdn_test.cpp): the state pool updated in
// place through state indices with a padding slot, varlen, GVA, the in-op options and the per-key
// gate. The chunked forward against the float64 token recurrence with FLA's metric and tolerance
// (spec/gdn.md): gate strengths, tails, varlen with 1-token and empty sequences, GVA, both state
// layouts, unaligned rows, activations past 2^31 elements. Outputs NaN-poisoned before every
// launch. Metric: RMS(err) / RMS(ref).
#include <algorithm>
#include <memory>

#include "gdn_test_util.hpp"
#include "gpu_util.hpp"

namespace attnkit::test {
namespace {

// Device copies of every tensor of d; `dev` holds d's tensors with device views.
struct DeviceGdn {
  std::vector<std::unique_ptr<DeviceTensor>> bufs;
  GdnData dev;
  DeviceTensor* out = nullptr;
  DeviceTensor* ht = nullptr;
  explicit DeviceGdn(const GdnData& d) : dev(d) {
    auto mirror = [&](const HostTensor& h, HostTensor& target) -> DeviceTensor* {
      if (!h.view.defined()) return nullptr;
      bufs.push_back(std::make_unique<DeviceTensor>(h));
      target.view = bufs.back()->view;
      return bufs.back().get();
    };
    mirror(d.q, dev.q);
    mirror(d.k, dev.k);
    mirror(d.v, dev.v);
    mirror(d.g, dev.g);
    mirror(d.gk, dev.gk);
    mirror(d.beta, dev.beta);
    mirror(d.A_log, dev.A_log);
    mirror(d.dt_bias, dev.dt_bias);
    mirror(d.h0, dev.h0);
    mirror(d.cu, dev.cu);
    out = mirror(d.out, dev.out);
    ht = mirror(d.ht, dev.ht);
  }
};

struct DecodeCase {
  GdnCase c;
  std::vector<int64_t> indices;  // empty: state[n]
  int64_t pool = 0;
  int64_t row_pad = 0;  // > 0: state rows padded (non-contiguous K x V slices, the general kernel)
};

void check_decode(const DecodeCase& dc) {
  const GdnCase& c = dc.c;
  GdnData d = make_gdn(c, 21);
  const int64_t slots = dc.indices.empty() ? c.N() : dc.pool;
  const bool kfirst = c.layout == StateLayout::kKV;
  const int64_t rows = kfirst ? c.K : c.V, cols = kfirst ? c.V : c.K;
  HostTensor pool(DType::kFloat32, {slots, c.HV, rows, cols + dc.row_pad});
  pool.view.sizes[3] = cols;  // a [slots, HV, rows, cols] view with row stride cols + row_pad
  std::mt19937 rng(22);
  pool.randn(rng, 0.5);
  HostTensor idx = dc.indices.empty() ? HostTensor() : index_tensor(DType::kInt32, dc.indices);
  auto params = [&](const GdnData& x, const TensorView& state, const TensorView& out, const TensorView& indices,
                    const TensorView& cu) {
    GdnDecodeParams p;
    p.q = x.q.view;
    p.k = x.k.view;
    p.v = x.v.view;
    p.beta = x.beta.view;
    if (x.g.view.defined()) p.g = x.g.view;
    if (x.gk.view.defined()) p.gk = x.gk.view;
    if (x.A_log.view.defined()) {
      p.A_log = x.A_log.view;
      p.dt_bias = x.dt_bias.view;
    }
    p.state = state;
    p.out = out;
    p.state_indices = indices;
    p.cu_seqlens = cu;
    p.use_qk_l2norm = c.l2norm;
    p.beta_is_logit = c.beta_logit;
    p.state_layout = c.layout;
    return p;
  };
  // CPU reference.
  HostTensor pool_cpu = pool, out_cpu = d.out;
  ASSERT_OK(gdn_decode(params(d, pool_cpu.view, out_cpu.view, idx.view, d.cu.view)));
  // GPU.
  DeviceGdn g(d);
  DeviceTensor state(pool);
  std::unique_ptr<DeviceTensor> didx;
  TensorView idx_view;
  if (idx.view.defined()) { didx = std::make_unique<DeviceTensor>(idx); idx_view = didx->view; }
  g.out->poison();
  const Status st = gdn_decode(params(g.dev, state.view, g.out->view, idx_view, g.dev.cu.view));
  ASSERT_TRUE(st.ok()) << st.message();
  HostTensor out_gpu = d.out, pool_gpu = pool;
  g.out->copy_to(out_gpu);
  state.copy_to(pool_gpu);
  const auto o = out_gpu.values();
  ASSERT_TRUE(all_finite(o)) << "unwritten or non-finite outputs";
  EXPECT_LT(rel_rms(o, out_cpu.values()), 1e-3);
  EXPECT_LT(rel_rms(pool_gpu.values(), pool_cpu.values()), 1e-4);
}

class GdnDecodeGpu : public GpuTest {};

// A decode case of B sequences of T tokens, H query / key heads, HV value heads, K = V = D.
DecodeCase decode_case(DType dt, int64_t B, int64_t T, int64_t H, int64_t HV, int64_t D) {
  DecodeCase dc;
  dc.c.dt = dt;
  dc.c.B = B;
  dc.c.T = T;
  dc.c.H = H;
  dc.c.HV = HV;
  dc.c.K = dc.c.V = D;
  return dc;
}

TEST_F(GdnDecodeGpu, TokensPerSequenceAndHeadDims) {
  for (int64_t D : {64, 128})
    for (int64_t T : {1, 3, 64}) {
      SCOPED_TRACE("D=" + std::to_string(D) + " T=" + std::to_string(T));
      DecodeCase dc = decode_case(DType::kBFloat16, 5, T, 2, 4, D);
      dc.c.l2norm = true;
      check_decode(dc);
    }
}

TEST_F(GdnDecodeGpu, StatePoolOptionsAndPerKeyGate) {
  DecodeCase dc = decode_case(DType::kFloat16, 5, 2, 1, 4, 128);
  dc.c.l2norm = dc.c.beta_logit = dc.c.fused_gate = true;
  dc.indices = {3, -1, 0, 5, 1};
  dc.pool = 6;
  check_decode(dc);
  DecodeCase gk = dc;
  gk.c.fused_gate = false;
  gk.c.scalar_gate = false;
  gk.c.per_key_gate = true;
  check_decode(gk);
}

TEST_F(GdnDecodeGpu, NonContiguousStateSlices) {
  for (int64_t D : {64, 128}) {
    DecodeCase dc = decode_case(DType::kBFloat16, 3, 2, 2, 4, D);
    dc.c.l2norm = true;
    dc.row_pad = 8;
    check_decode(dc);
  }
}

TEST_F(GdnDecodeGpu, VFirstStateLayout) {
  for (int64_t D : {64, 128}) {
    DecodeCase dc = decode_case(DType::kBFloat16, 3, 3, 2, 4, D);
    dc.c.l2norm = dc.c.fused_gate = true;
    dc.c.layout = StateLayout::kVK;
    dc.indices = {2, -1, 0};
    dc.pool = 4;
    check_decode(dc);
  }
}

TEST_F(GdnDecodeGpu, VarlenTokens) {
  DecodeCase dc = decode_case(DType::kBFloat16, 1, 7, 2, 2, 64);
  dc.c.seqlens = {1, 0, 4, 2};
  check_decode(dc);
}

// The tests above have fewer (sequence, head) items than SMs: they run the general kernel, a CTA
// per (item, half of its value columns). With more items than SMs, contiguous K-first states
// take the streaming kernel: here with every option, 280 items (over its threshold of one item a
// CTA at D = 128 and two CTAs an SM at D = 64 on a 132-SM GPU).
TEST_F(GdnDecodeGpu, StreamingKernelWithEveryOption) {
  for (int64_t D : {64, 128}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    DecodeCase dc = decode_case(DType::kBFloat16, 70, 3, 2, 4, D);
    dc.c.l2norm = dc.c.beta_logit = dc.c.fused_gate = true;
    check_decode(dc);
    DecodeCase gk = decode_case(DType::kFloat16, 70, 2, 4, 4, D);
    gk.c.scalar_gate = false;
    gk.c.per_key_gate = true;
    check_decode(gk);
  }
}

// Many more items than CTAs: the streaming kernel's CTAs run ~10 items each, alternating between
// their two halves through three state buffers and six barriers (decode.cu), with padding slots
// (no state load: the barrier is arrived on without bytes) and, packed, sequences of 0 to 3
// tokens among them.
TEST_F(GdnDecodeGpu, ManyItemsPerCtaWithPaddingAndVarlen) {
  DecodeCase pad = decode_case(DType::kBFloat16, 700, 2, 1, 2, 128);
  pad.c.l2norm = true;
  pad.pool = 800;
  for (int64_t n = 0; n < pad.c.B; ++n) pad.indices.push_back(n % 7 == 3 ? -1 : (n * 37) % pad.pool);  // 37 and 800 coprime
  check_decode(pad);
  DecodeCase packed = decode_case(DType::kFloat16, 1, 0, 2, 2, 64);
  for (int n = 0; n < 1200; ++n) packed.c.seqlens.push_back((n * 5) % 4);
  for (int64_t l : packed.c.seqlens) packed.c.T += l;
  check_decode(packed);
}

// ---- chunked forward ----

struct ChunkOptions {
  int64_t row_pad = 0;          // > 0: q, k, v rows padded (the element-wise load path)
  DType h0_dtype = DType::kFloat32;
  int64_t h0_pad = 0;           // > 0: h0's rows padded (4: still 16-byte aligned; else not)
  int64_t ht_pad = 0;           // > 0: ht's rows padded likewise
  int num_segments = 0;         // GdnFwdParams::num_segments
  bool odd_unit_strides = false;  // size-1 dims of q, k, v, out given strides of 3 elements (never stepped)
  bool keep_intermediates = false;  // a training forward (GdnFwdParams::intermediates)
};

// The chunked forward on the GPU: d's inputs to the device, its outputs (NaN-poisoned first) back
// as o and ht (ht empty without a final state).
void run_chunk(const GdnCase& c, const GdnData& d, std::vector<double>& o, std::vector<double>& ht, int num_segments = 0,
               bool odd_unit_strides = false, bool keep_intermediates = false, GdnKeep keep = GdnKeep::kAll) {
  DeviceGdn g(d);
  g.out->poison();
  if (g.ht) g.ht->poison();
  GdnFwdParams p;
  p.in = gdn_inputs(c, g.dev);
  p.out = g.dev.out.view;
  p.num_segments = num_segments;
  if (g.ht) p.final_state = g.dev.ht.view;
  if (odd_unit_strides)
    for (TensorView* t : {&p.in.q, &p.in.k, &p.in.v, &p.out}) set_odd_unit_strides(*t);
  p.keep = keep;
  const DeviceScratch kept(keep_intermediates ? gdn_intermediates_size(p.in, keep) : 0);
  if (keep_intermediates) p.intermediates = kept.workspace();
  const DeviceScratch ws(gdn_forward_workspace_size(p));  // the WY kernel's w, u, gamma
  p.workspace = ws.workspace();
  const Status st = gdn_forward(p);
  ASSERT_TRUE(st.ok()) << st.message();
  HostTensor out = d.out;
  g.out->copy_to(out);
  o = out.values();
  ht.clear();
  if (!g.ht) return;
  HostTensor h = d.ht;
  g.ht->copy_to(h);
  ht = h.values();
}

void check_chunk(const GdnCase& c, const ChunkOptions& opt = {}) {
  GdnData d = make_gdn(c, 31);
  if (opt.row_pad) {
    d.q = padded_rows(d.q, opt.row_pad);
    d.k = padded_rows(d.k, opt.row_pad);
    d.v = padded_rows(d.v, opt.row_pad);
  }
  if (c.h0 && opt.h0_dtype != d.h0.view.dtype) d.h0 = d.h0.to(opt.h0_dtype);
  if (c.h0 && opt.h0_pad) d.h0 = padded_rows(d.h0, opt.h0_pad);
  if (c.final_state && opt.ht_pad) d.ht = padded_rows(d.ht, opt.ht_pad);
  std::vector<double> o_ref, ht_ref, o, h;
  gdn_oracle(c, d, o_ref, ht_ref);
  ASSERT_NO_FATAL_FAILURE(run_chunk(c, d, o, h, opt.num_segments, opt.odd_unit_strides, opt.keep_intermediates));
  ASSERT_TRUE(all_finite(o)) << "unwritten or non-finite outputs";
  EXPECT_LT(rel_rms(o, o_ref), 0.005);
  if (!c.final_state) return;
  ASSERT_TRUE(all_finite(h)) << "unwritten or non-finite final state";
  EXPECT_LT(rel_rms(h, ht_ref), 0.005);
}

GdnCase chunk_case(DType dt, int64_t D, int64_t T) {
  GdnCase c = head_case(dt, D, T);
  c.l2norm = true;
  return c;
}

class GdnChunkGpu : public GdnDecodeGpu {};

TEST_F(GdnChunkGpu, HeadDimsDtypesAndTails) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t D : {64, 128})
      for (int64_t T : {1, 63, 200}) {
        SCOPED_TRACE("dtype=" + std::to_string(int(dt)) + " D=" + std::to_string(D) + " T=" + std::to_string(T));
        check_chunk(chunk_case(dt, D, T));
      }
}

TEST_F(GdnChunkGpu, GateStrengths) {
  for (auto [lo, hi] : {std::pair{-5.0, -1.0}, std::pair{-0.05, 0.0}, std::pair{0.0, 0.0}}) {
    SCOPED_TRACE("g in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    GdnCase c = chunk_case(DType::kBFloat16, 128, 300);
    c.g_lo = lo;
    c.g_hi = hi;
    check_chunk(c);
  }
}

TEST_F(GdnChunkGpu, VarlenWithShortAndEmptySequencesAndGva) {
  for (auto [H, HV] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{1, 4}}) {
    GdnCase c = chunk_case(DType::kBFloat16, 64, 0);
    c.B = 1;
    c.seqlens = {1, 0, 130, 64, 65, 7};
    c.T = 267;
    c.H = H;
    c.HV = HV;
    check_chunk(c);
  }
}

// With 96 or more (sequence, value head, 64-column block) CTAs at K = 128, inference forms w and
// u inside the recurrence kernel from the WY kernel's [Tu | Tw] rows (chunk_fwd_wu.cuh); its
// workspace then has no room for u, which is how the test knows that path ran. Dense tails,
// fp16 with GVA, and a packed batch with empty and short sequences.
TEST_F(GdnChunkGpu, ManyHeadsFormWAndUInTheRecurrence) {
  std::vector<GdnCase> cases(3, chunk_case(DType::kBFloat16, 128, 0));
  cases[0].B = 2, cases[0].T = 200, cases[0].H = cases[0].HV = 48;
  cases[1].dt = DType::kFloat16, cases[1].T = 130, cases[1].H = 48, cases[1].HV = 96;
  cases[2].B = 1, cases[2].seqlens = {1, 0, 130, 64, 65, 7}, cases[2].T = 267, cases[2].H = 16, cases[2].HV = 64;
  for (const GdnCase& c : cases) {
    SCOPED_TRACE("B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " HV=" + std::to_string(c.HV));
    {
      GdnData d = make_gdn(c, 5);
      DeviceGdn g(d);
      GdnFwdParams p;
      p.in = gdn_inputs(c, g.dev);
      p.out = g.dev.out.view;
      const int64_t rows_heads = c.B * c.T * c.HV;  // w 2K + gamma 4 bytes a row and head, each buffer 256-aligned
      EXPECT_LE(gdn_forward_workspace_size(p), size_t(rows_heads * (2 * c.K + 4) + 512)) << "w and u went through the workspace";
    }
    check_chunk(c);
  }
}

// N * HV = 8500 * 8 > 65535 (sequence, head) pairs: both kernels' grids, and the WY kernel's
// slot -> chunk bisection over thousands of sequences of 0 to 3 tokens. Without states: 68k
// final states would be 1 GB.
TEST_F(GdnChunkGpu, ThousandsOfShortSequences) {
  GdnCase c = chunk_case(DType::kBFloat16, 64, 0);
  c.B = 1;
  c.h0 = c.final_state = false;
  c.H = 2;
  c.HV = 8;
  for (int i = 0; i < 8500; ++i) c.seqlens.push_back(i % 4);
  c.seqlens[4321] = 150;  // and one with a tail chunk among them
  c.T = 0;
  for (int64_t l : c.seqlens) c.T += l;
  check_chunk(c);
}

// Elements [first * n, last * n) of x: the slice of a tensor whose leading (flattened) index runs
// over tokens, chunks or sequences with n elements each.
std::vector<double> slice(const std::vector<double>& x, int64_t first, int64_t last, int64_t n) {
  return {x.begin() + first * n, x.begin() + last * n};
}

// Tokens [t0, t1) of every per-token input of a packed batch (q, k, v, beta, g) set to NaN.
void poison_tokens(GdnData& d, int64_t t0, int64_t t1) {
  for (HostTensor* x : {&d.q, &d.k, &d.v, &d.beta, &d.g}) {
    if (!x->view.defined()) continue;
    const int64_t per_token = x->numel() / x->view.sizes[1];  // [1, T, ...]
    for (int64_t i = t0 * per_token; i < t1 * per_token; ++i) x->set(i, std::nan(""));
  }
}

// A TMA box reads on past a sequence's end into the next sequence's rows (row_tma.cuh), in the
// recurrence and in the WY kernel's w, u that it reads: NaN in every input row of sequence 1 must
// stay there. Sequence 0's last chunk (tokens 64..69) is the one whose boxes reach into it;
// sequence 2's are past the tensor's end. Sequences 0 and 2 checked against the float64 recurrence
// on the clean inputs.
TEST_F(GdnChunkGpu, NonFiniteRowsStayInTheirSequence) {
  for (auto [D, HV] : {std::pair{64, 4}, std::pair{128, 4}, std::pair{128, 64}}) {  // HV 64: w, u formed in the recurrence
    SCOPED_TRACE("D=" + std::to_string(D) + " HV=" + std::to_string(HV));
    GdnCase c = chunk_case(DType::kBFloat16, D, 0);
    c.B = 1;
    c.seqlens = {70, 130, 60};
    c.T = 260;
    c.HV = HV;
    GdnData d = make_gdn(c, 41);
    std::vector<double> o_ref, ht_ref, o, h;
    gdn_oracle(c, d, o_ref, ht_ref);
    poison_tokens(d, 70, 200);
    ASSERT_NO_FATAL_FAILURE(run_chunk(c, d, o, h));
    const int64_t per_token = c.HV * c.V, per_state = c.HV * c.K * c.V;
    for (auto [n, t0, t1] : {std::tuple{0, 0, 70}, std::tuple{2, 200, 260}}) {
      SCOPED_TRACE("sequence " + std::to_string(n));
      const auto os = slice(o, t0, t1, per_token), hs = slice(h, n, n + 1, per_state);
      ASSERT_TRUE(all_finite(os)) << "another sequence's NaN in the outputs";
      ASSERT_TRUE(all_finite(hs)) << "another sequence's NaN in the final state";
      EXPECT_LT(rel_rms(os, slice(o_ref, t0, t1, per_token)), 0.005);
      EXPECT_LT(rel_rms(hs, slice(ht_ref, n, n + 1, per_state)), 0.005);
    }
  }
}

// ---- activations past 2^31 elements (64-bit offsets) ----

// Rows [from, from + rows) of a small tensor's leading rows placed at row `to` of a big one (a row:
// one token (b, t) of q / k / v / beta / g / out, or one sequence of h0 / ht).
struct RowBlock {
  int64_t from, rows, to;
};

// A device tensor like h but with leading dims `lead` (h's first lead.size() dims are its rows),
// filled with the byte `fill`, h's row blocks copied in; its view into *view.
std::unique_ptr<DeviceScratch> big_tensor(const HostTensor& h, const std::vector<int64_t>& lead, unsigned char fill,
                                          const std::vector<RowBlock>& blocks, TensorView* view) {
  const int lead_dims = static_cast<int>(lead.size());
  int64_t h_rows = 1, big_rows = 1;
  for (int d = 0; d < lead_dims; ++d) h_rows *= h.view.sizes[d], big_rows *= lead[d];
  const size_t row_bytes = h.buf.size() / static_cast<size_t>(h_rows);
  auto t = std::make_unique<DeviceScratch>(row_bytes * static_cast<size_t>(big_rows));
  EXPECT_EQ(cudaMemset(t->ptr, fill, t->bytes), cudaSuccess);
  for (const RowBlock& b : blocks)
    EXPECT_EQ(cudaMemcpy(static_cast<char*>(t->ptr) + b.to * row_bytes, h.buf.data() + b.from * row_bytes, b.rows * row_bytes,
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  *view = h.view;
  view->data = t->ptr;
  view->device = Device::cuda(0);
  for (int d = 0; d < lead_dims; ++d) view->sizes[d] = lead[d];
  int64_t st = 1;
  for (int d = view->ndim - 1; d >= 0; --d) view->strides[d] = st, st *= view->sizes[d];
  return t;
}

// The checked token and sequence rows of `small` run inside a forward whose q, k, v and output
// pass 2^31 elements: big is small's case with B x T tokens (B = 1 and `seqlens` when packed);
// `tokens` places small's token rows (b * T + t) among big's, `seqs` its sequences. Everything
// else is filler (bf16 0x3C3C = 0.0115, gates fp32 0xBCBCBCBC = -0.023: finite, non-zero).
// Checked against the float64 recurrence of small; every filler sequence's final state must be
// finite.
void check_past_2_31(const GdnCase& small, const GdnCase& big, const std::vector<RowBlock>& tokens,
                     const std::vector<RowBlock>& seqs) {
  GdnData d = make_gdn(small, 51);
  std::vector<double> o_ref, ht_ref;
  gdn_oracle(small, d, o_ref, ht_ref);
  ASSERT_GT(big.B * big.T * big.H * big.K, int64_t(1) << 31);
  GdnData dev = d;  // views replaced below
  std::vector<std::unique_ptr<DeviceScratch>> bufs;
  const std::vector<int64_t> tok = {big.B, big.T}, seq = {big.N()};
  bufs.push_back(big_tensor(d.q, tok, 0x3C, tokens, &dev.q.view));
  bufs.push_back(big_tensor(d.k, tok, 0x3C, tokens, &dev.k.view));
  bufs.push_back(big_tensor(d.v, tok, 0x3C, tokens, &dev.v.view));
  bufs.push_back(big_tensor(d.beta, tok, 0x3C, tokens, &dev.beta.view));
  bufs.push_back(big_tensor(d.g, tok, 0xBC, tokens, &dev.g.view));
  bufs.push_back(big_tensor(d.h0, seq, 0x3C, seqs, &dev.h0.view));
  DeviceScratch* out = bufs.emplace_back(big_tensor(d.out, tok, 0xff, {}, &dev.out.view)).get();
  DeviceScratch* ht = bufs.emplace_back(big_tensor(d.ht, seq, 0xff, {}, &dev.ht.view)).get();
  std::unique_ptr<DeviceTensor> dcu;
  dev.cu = HostTensor();
  if (!big.seqlens.empty()) {
    std::vector<int64_t> cu = {0};
    for (int64_t l : big.seqlens) cu.push_back(cu.back() + l);
    dcu = std::make_unique<DeviceTensor>(index_tensor(DType::kInt64, cu));
    dev.cu.view = dcu->view;
  }
  GdnFwdParams p;
  p.in = gdn_inputs(big, dev);
  p.out = dev.out.view;
  p.final_state = dev.ht.view;
  const DeviceScratch ws(gdn_forward_workspace_size(p));
  p.workspace = ws.workspace();
  const Status st = gdn_forward(p);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Back: the checked rows of the output and of the final state, into small-shaped host tensors.
  auto fetch = [](const DeviceScratch& t, HostTensor& h, int64_t h_rows, const std::vector<RowBlock>& blocks) {
    const size_t row_bytes = h.buf.size() / static_cast<size_t>(h_rows);
    for (const RowBlock& b : blocks)
      EXPECT_EQ(cudaMemcpy(h.buf.data() + b.from * row_bytes, static_cast<const char*>(t.ptr) + b.to * row_bytes,
                           b.rows * row_bytes, cudaMemcpyDeviceToHost),
                cudaSuccess);
  };
  HostTensor o_small = d.out, h_small = d.ht;
  fetch(*out, o_small, small.B * small.T, tokens);
  fetch(*ht, h_small, small.N(), seqs);
  const auto o = o_small.values(), h = h_small.values();
  ASSERT_TRUE(all_finite(o)) << "unwritten or non-finite outputs";
  ASSERT_TRUE(all_finite(h)) << "unwritten or non-finite final states";
  EXPECT_LT(rel_rms(o, o_ref), 0.005);
  EXPECT_LT(rel_rms(h, ht_ref), 0.005);
  // Every filler sequence's final state written and finite.
  std::vector<float> all(ht->bytes / sizeof(float));
  ASSERT_EQ(cudaMemcpy(all.data(), ht->ptr, ht->bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::all_of(all.begin(), all.end(), [](float x) { return std::isfinite(x); }))
      << "a filler sequence's final state is not finite";
}

// Packed: 2 checked sequences (150 and 130 tokens, tail chunks) around 8 filler sequences of
// 2^17 tokens, H = HV = 16, K = V = 128 (2048 elements a token): the last one starts at token
// 150 + 2^20, element 2^31 + 150 x 2048 of q and of the output.
TEST_F(GdnChunkGpu, ActivationsPast2To31ElementsVarlen) {
  GdnCase small = chunk_case(DType::kBFloat16, 128, 0);
  small.B = 1;  // packed
  small.H = small.HV = 16;
  small.seqlens = {150, 130};
  small.T = 280;
  GdnCase big = small;
  big.seqlens = {150};
  for (int i = 0; i < 8; ++i) big.seqlens.push_back(int64_t(1) << 17);
  big.seqlens.push_back(130);
  big.T = 280 + 8 * (int64_t(1) << 17);
  check_past_2_31(small, big, {{0, 150, 0}, {150, 130, big.T - 130}}, {{0, 1, 0}, {1, 1, 9}});
}

// Dense: 2 checked batch rows of 256 tokens at rows 0 and 1024 of B = 1025, H = HV = 64 (w and u
// formed in the recurrence): q holds 2^31 + 2^21 elements, batch row 1024 starts at 2^31.
TEST_F(GdnChunkGpu, ActivationsPast2To31ElementsDenseManyHeads) {
  GdnCase small = chunk_case(DType::kBFloat16, 128, 256);
  small.B = 2;
  small.H = small.HV = 64;
  GdnCase big = small;
  big.B = 1025;
  check_past_2_31(small, big, {{0, 256, 0}, {256, 256, 1024 * 256}}, {{0, 1, 0}, {1, 1, 1024}});
}

// A case's device tensors and forward params (no final state, no workspace), for the tests that
// call gdn_forward themselves.
struct ChunkCall {
  GdnData d;
  DeviceGdn g;
  GdnFwdParams p;
  ChunkCall(const GdnCase& c, uint32_t seed) : d(make_gdn(c, seed)), g(d) {
    p.in = gdn_inputs(c, g.dev);
    p.out = g.dev.out.view;
  }
};

TEST_F(GdnChunkGpu, WorkspaceIsSizedAndChecked) {
  GdnCase c = chunk_case(DType::kBFloat16, 64, 100);
  ChunkCall call(c, 7);
  GdnFwdParams& p = call.p;
  const size_t need = gdn_forward_workspace_size(p);
  EXPECT_GE(need, size_t(c.B * c.T * c.HV * (2 * c.K + 2 * c.V + 4)));  // w, u (16-bit), gamma (fp32)
  const DeviceScratch ws(need);
  p.workspace = {ws.ptr, need - 1};
  const Status st = gdn_forward(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();
}

TEST_F(GdnChunkGpu, VFirstStateFusedGateBetaLogitNoInitialState) {
  GdnCase c = chunk_case(DType::kBFloat16, 128, 150);
  c.layout = StateLayout::kVK;
  c.fused_gate = c.beta_logit = true;
  c.h0 = false;
  check_chunk(c);
  c.l2norm = false;  // unit keys from make_gdn
  c.h0 = true;
  check_chunk(c);
}

// One sequence and one head whose size-1 dims carry odd strides (torch may leave any there): the
// row loads must still be right (and take the TMA path: src/cuda/unit_strides.hpp).
TEST_F(GdnChunkGpu, OddUnitStrides) {
  for (int64_t D : {64, 128}) {
    GdnCase c = chunk_case(DType::kBFloat16, D, 200);
    c.B = 1;
    c.H = c.HV = 1;
    check_chunk(c, {.odd_unit_strides = true});
  }
}

TEST_F(GdnChunkGpu, UnalignedRowsAndBf16InitialState) {
  GdnCase c = chunk_case(DType::kFloat16, 64, 100);
  check_chunk(c, {.row_pad = 4, .h0_dtype = DType::kBFloat16});
}

// h0 in each float dtype, both head dims: the state warpgroup switches on its dtype once for all
// its elements (token_tensor.cuh, load_any_floats), a path of its own per dtype.
TEST_F(GdnChunkGpu, InitialStateInEveryDtype) {
  for (DType sdt : {DType::kBFloat16, DType::kFloat16, DType::kFloat64})
    for (int64_t D : {64, 128}) {
      SCOPED_TRACE("h0 dtype=" + std::to_string(int(sdt)) + " D=" + std::to_string(D));
      check_chunk(chunk_case(DType::kBFloat16, D, 130), {.h0_dtype = sdt});
    }
}

// h0 and ht with padded rows — by 4 (a row stride past V, rows still 16-byte aligned) and by 1 (not
// aligned) — beside unpadded rows, both layouts, both head dims; the inference and the training
// forward. (Paths by 16-byte row pieces for aligned fp32 rows, as bwd_dhu's ends take, were built
// for h0 and for ht and measured without gain: docs/perf/gdn_chunk_fwd.md.)
TEST_F(GdnChunkGpu, InitialStateRowsAlignedOrNot) {
  for (int64_t D : {64, 128})
    for (StateLayout layout : {StateLayout::kKV, StateLayout::kVK})
      for (int64_t pad : {0, 4, 1}) {
        SCOPED_TRACE("D=" + std::to_string(D) + " layout=" + std::to_string(int(layout)) + " h0 rows padded by " +
                     std::to_string(pad));
        GdnCase c = chunk_case(DType::kBFloat16, D, 130);
        c.layout = layout;
        check_chunk(c, {.h0_pad = pad, .ht_pad = pad});
        check_chunk(c, {.h0_pad = pad, .ht_pad = pad, .keep_intermediates = true});
      }
}

// The sequence split (chunk_fwd_split.cuh) forced on: segments from 2 to one a chunk (the
// stitch runs from 3 on), a tail chunk in the last segment or none, both head dims and dtypes,
// GVA with two sequences, h0 absent / fp32 / bf16, both layouts, the fused gate and logit beta,
// strong gates, the element-wise load path, no final state; a training forward's split.
TEST_F(GdnChunkGpu, SegmentSplitIsExact) {
  GdnCase base = chunk_case(DType::kBFloat16, 128, 1000);  // 16 chunks, the last of 40 tokens
  for (int segments : {2, 3, 5, 16}) {
    SCOPED_TRACE("segments=" + std::to_string(segments));
    check_chunk(base, {.num_segments = segments});
  }
  GdnCase gva = chunk_case(DType::kFloat16, 64, 700);
  gva.B = 2, gva.H = 1, gva.HV = 2;
  check_chunk(gva, {.num_segments = 4});
  GdnCase vk = chunk_case(DType::kBFloat16, 128, 640);  // 10 whole chunks
  vk.layout = StateLayout::kVK;
  vk.fused_gate = vk.beta_logit = true;
  vk.h0 = false;
  check_chunk(vk, {.num_segments = 3});
  GdnCase strong = chunk_case(DType::kBFloat16, 64, 900);
  strong.g_lo = -5.0, strong.g_hi = -1.0;
  check_chunk(strong, {.num_segments = 4});
  check_chunk(chunk_case(DType::kFloat16, 128, 500), {.row_pad = 4, .h0_dtype = DType::kBFloat16, .num_segments = 3});
  GdnCase no_ht = chunk_case(DType::kBFloat16, 64, 300);
  no_ht.final_state = false;
  check_chunk(no_ht, {.num_segments = 3});
  // A training forward splits too, keeping each segment's chunks (the backward's tests read them).
  check_chunk(base, {.num_segments = 3, .keep_intermediates = true});
  check_chunk(vk, {.num_segments = 4, .keep_intermediates = true});
}

// A training forward keeping T alone (GdnKeep::kT) runs the inference kernels and writes T
// besides: its outputs are the inference forward's bit for bit — on the w / u-in-recurrence path
// (K = 128, 96+ chains), the plain one (K = 64), the sequence split, varlen and unaligned rows.
TEST_F(GdnChunkGpu, KeptTForwardIsInferenceBitForBit) {
  GdnCase wu = chunk_case(DType::kBFloat16, 128, 300);
  wu.B = 4, wu.H = wu.HV = 12;  // 4 x 12 x 2 value blocks = 96 chains: w and u formed in the recurrence
  GdnCase plain = chunk_case(DType::kFloat16, 64, 200);
  plain.fused_gate = plain.beta_logit = plain.l2norm = true;
  GdnCase varlen = chunk_case(DType::kBFloat16, 128, 0);
  varlen.B = 1;
  varlen.seqlens = {1, 0, 130, 64, 65, 7};
  varlen.T = 267;
  varlen.H = 2, varlen.HV = 4;
  struct Run {
    GdnCase c;
    int segments;
    int64_t row_pad;
  };
  int i = 0;
  for (const Run& r : {Run{wu, 0, 0}, Run{plain, 0, 0}, Run{chunk_case(DType::kBFloat16, 128, 1000), 3, 0}, Run{varlen, 0, 0},
                       Run{plain, 0, 4}}) {
    SCOPED_TRACE("case " + std::to_string(i++));
    GdnData d = make_gdn(r.c, 31);
    if (r.row_pad) {
      d.q = padded_rows(d.q, r.row_pad);
      d.k = padded_rows(d.k, r.row_pad);
      d.v = padded_rows(d.v, r.row_pad);
    }
    std::vector<double> o, h, o_t, h_t;
    ASSERT_NO_FATAL_FAILURE(run_chunk(r.c, d, o, h, r.segments));
    ASSERT_NO_FATAL_FAILURE(run_chunk(r.c, d, o_t, h_t, r.segments, false, true, GdnKeep::kT));
    ASSERT_TRUE(all_finite(o_t));
    EXPECT_EQ(o_t, o);
    EXPECT_EQ(h_t, h);
  }
}

// One head of a long sequence: 2 chains on a GPU of 100+ SMs, so the forward splits the sequence
// by itself (its workspace then holds the segments' fp32 starts and P^T, which is how the test
// knows) and still matches the recurrence.
TEST_F(GdnChunkGpu, FewHeadsSplitTheSequenceOnTheirOwn) {
  GdnCase c = chunk_case(DType::kBFloat16, 128, 4096);
  c.H = c.HV = 1;
  {
    ChunkCall call(c, 3);
    const size_t automatic = gdn_forward_workspace_size(call.p);
    call.p.num_segments = 1;
    EXPECT_GE(automatic, gdn_forward_workspace_size(call.p) + 2 * 128 * 128 * 4) << "no split chosen";
  }
  check_chunk(c);
}

TEST_F(GdnChunkGpu, NegativeSegmentCountIsRefused) {
  ChunkCall call(chunk_case(DType::kBFloat16, 64, 100), 5);
  call.p.num_segments = -1;
  const Status st = gdn_forward(call.p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("num_segments"), std::string::npos) << st.message();
}

TEST_F(GdnChunkGpu, UnsupportedInputsAreRefused) {
  GdnCase c = chunk_case(DType::kBFloat16, 32, 10);
  ChunkCall call(c, 5);
  const Status st = gdn_forward(call.p);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("K = V in {64, 128}"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace attnkit::test
