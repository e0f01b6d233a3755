// tests/cpp/attention_bwd_gpu_test.cpp — the Hopper attention backward against the CPU backend.
//
// Reference: the CPU backend in float64 (forward and backward) on the same rounded inputs. The GPU
// backward gets the out and LSE of the CPU backend's 16-bit forward, as does the CPU backend's own
// 16-bit backward; the GPU error may be at most twice that run's error plus 1e-3 of the gradient's
// scale. Outputs and the workspace are poisoned with NaN before each launch.
#include <algorithm>

#include "attention_case.hpp"
#include "gpu_util.hpp"

namespace attnkit::test {
namespace {

struct Inputs {
  HostTensor q, k, v, dout, cuq, cuk;  // float64 holding 16-bit-representable values
  bool varlen = false;
  int64_t max_q = 0, max_k = 0;
};

struct Grads {
  HostTensor dq, dk, dv;
};

Inputs make_inputs(const Case& c) {
  std::mt19937 rng(11);
  Inputs in;
  in.varlen = !c.lq.empty();
  int64_t tq = c.Sq, tk = c.Sk;
  if (in.varlen) {
    std::vector<int64_t> a = {0}, b = {0};
    for (size_t i = 0; i < c.lq.size(); ++i) {
      a.push_back(a.back() + c.lq[i]);
      b.push_back(b.back() + c.lk[i]);
    }
    in.cuq = index_tensor(DType::kInt32, a);
    in.cuk = index_tensor(DType::kInt32, b);
    tq = a.back();
    tk = b.back();
    in.max_q = *std::max_element(c.lq.begin(), c.lq.end());
    in.max_k = *std::max_element(c.lk.begin(), c.lk.end());
  }
  auto shape = [&](int64_t s, int64_t h) {
    return in.varlen ? std::vector<int64_t>{s, h, c.D} : std::vector<int64_t>{c.B, s, h, c.D};
  };
  in.q = HostTensor(DType::kFloat64, shape(tq, c.Hq));
  in.k = HostTensor(DType::kFloat64, shape(tk, c.Hkv));
  in.v = HostTensor(DType::kFloat64, shape(tk, c.Hkv));
  in.dout = HostTensor(DType::kFloat64, shape(tq, c.Hq));
  for (HostTensor* t : {&in.q, &in.k, &in.v, &in.dout}) {
    t->randn(rng);
    *t = t->to(c.dt).to(DType::kFloat64);  // every run sees the same 16-bit values
  }
  if (c.broadcast_kv)
    for (HostTensor* t : {&in.k, &in.v}) copy_batch0_everywhere(*t);
  return in;
}

// Forward then backward on the CPU backend in `dt`; returns the gradients, and the forward's out
// and LSE through *out / *lse.
Grads cpu_run(const Case& c, const Inputs& in, DType dt, HostTensor* out, HostTensor* lse) {
  HostTensor q = in.q.to(dt), k = in.k.to(dt), v = in.v.to(dt), dout = in.dout.to(dt);
  *out = HostTensor(dt, std::vector<int64_t>(in.q.view.sizes, in.q.view.sizes + in.q.view.ndim));
  const int64_t tq = in.q.view.sizes[in.varlen ? 0 : 1];
  *lse = in.varlen ? HostTensor(DType::kFloat32, {c.Hq, tq}) : HostTensor(DType::kFloat32, {c.B, c.Hq, c.Sq});
  AttentionFwdParams f;
  f.q = q.view;
  f.k = k.view;
  f.v = v.view;
  f.out = out->view;
  f.lse = lse->view;
  f.mask = c.mask;
  f.softcap = c.softcap;
  f.scale = c.scale;
  if (in.varlen) {
    f.cu_seqlens_q = in.cuq.view;
    f.cu_seqlens_k = in.cuk.view;
    f.max_seqlen_q = in.max_q;
    f.max_seqlen_k = in.max_k;
  }
  EXPECT_TRUE(attention_forward(f).ok());
  Grads g{HostTensor(dt, std::vector<int64_t>(q.view.sizes, q.view.sizes + q.view.ndim)),
          HostTensor(dt, std::vector<int64_t>(k.view.sizes, k.view.sizes + k.view.ndim)),
          HostTensor(dt, std::vector<int64_t>(v.view.sizes, v.view.sizes + v.view.ndim))};
  AttentionBwdParams b;
  b.q = q.view;
  b.k = k.view;
  b.v = v.view;
  b.out = out->view;
  b.lse = lse->view;
  b.dout = dout.view;
  b.dq = g.dq.view;
  b.dk = g.dk.view;
  b.dv = g.dv.view;
  b.mask = c.mask;
  b.softcap = c.softcap;
  b.scale = c.scale;
  b.gqa_reduction = GqaReduction::kSplit;
  if (in.varlen) {
    b.cu_seqlens_q = in.cuq.view;
    b.cu_seqlens_k = in.cuk.view;
    b.max_seqlen_q = in.max_q;
    b.max_seqlen_k = in.max_k;
  }
  const Status st = attention_backward(b);
  EXPECT_TRUE(st.ok()) << st.message();
  return g;
}

// The GPU backward on the 16-bit inputs with the given forward out / LSE.
Status gpu_run(const Case& c, const Inputs& in, const HostTensor& out, const HostTensor& lse, GqaReduction red, bool deterministic,
               Grads* g) {
  std::vector<int> perm;
  if (c.strided && !in.varlen) perm = {0, 2, 1, 3};
  HostTensor q = in.q.to(c.dt, perm), k = in.k.to(c.dt, perm), v = in.v.to(c.dt, perm), dout = in.dout.to(c.dt, perm);
  HostTensor o = out.to(c.dt, perm);
  *g = Grads{HostTensor(c.dt, std::vector<int64_t>(q.view.sizes, q.view.sizes + q.view.ndim), perm),
             HostTensor(c.dt, std::vector<int64_t>(k.view.sizes, k.view.sizes + k.view.ndim), perm),
             HostTensor(c.dt, std::vector<int64_t>(v.view.sizes, v.view.sizes + v.view.ndim), perm)};
  DeviceTensor dq_(q), dk_(k), dv_(v), ddo(dout), dout_(o), dlse(lse), gq(g->dq), gk(g->dk), gv(g->dv);
  for (DeviceTensor* t : {&gq, &gk, &gv}) t->poison();
  AttentionBwdParams p;
  p.q = dq_.view;
  p.k = dk_.view;
  p.v = dv_.view;
  p.out = dout_.view;
  p.lse = dlse.view;
  p.dout = ddo.view;
  p.dq = gq.view;
  p.dk = gk.view;
  p.dv = gv.view;
  p.mask = c.mask;
  p.softcap = c.softcap;
  p.scale = c.scale;
  p.gqa_reduction = red;
  p.deterministic = deterministic;
  if (c.odd_unit_strides)
    for (TensorView* t : {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.dout, &p.dq, &p.dk, &p.dv}) set_odd_unit_strides(*t);
  if (c.broadcast_kv) p.k.strides[0] = p.v.strides[0] = 0;  // the gradients stay one per batch
  std::unique_ptr<DeviceTensor> dcq, dck;
  if (in.varlen) {
    dcq = std::make_unique<DeviceTensor>(in.cuq);
    dck = std::make_unique<DeviceTensor>(in.cuk);
    p.cu_seqlens_q = dcq->view;
    p.cu_seqlens_k = dck->view;
    p.max_seqlen_q = in.max_q;
    p.max_seqlen_k = in.max_k;
  }
  const size_t ws_bytes = attention_backward_workspace_size(p);
  void* ws = nullptr;
  EXPECT_EQ(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 1)), cudaSuccess);
  EXPECT_EQ(cudaMemset(ws, 0xff, std::max<size_t>(ws_bytes, 1)), cudaSuccess);  // kernels must not rely on zeros
  p.workspace = {ws, ws_bytes};
  const Status st = attention_backward(p);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(ws);
  if (!st.ok()) return st;
  gq.copy_to(g->dq);
  gk.copy_to(g->dk);
  gv.copy_to(g->dv);
  return st;
}

const char* reduction_name(GqaReduction red) {
  switch (red) {
    case GqaReduction::kAtomic: return " atomic";
    case GqaReduction::kSplit: return " split";
    case GqaReduction::kPacked: return " packed";
    default: return " auto";
  }
}

void check(const Case& c, GqaReduction red = GqaReduction::kAtomic) {
  SCOPED_TRACE(c.name() + reduction_name(red));
  const Inputs in = make_inputs(c);
  HostTensor out64, lse64, out16, lse16;
  const Grads ref = cpu_run(c, in, DType::kFloat64, &out64, &lse64);
  const Grads cpu = cpu_run(c, in, c.dt, &out16, &lse16);
  Grads gpu;
  const Status st = gpu_run(c, in, out16, lse16, red, false, &gpu);
  ASSERT_TRUE(st.ok()) << st.message();
  expect_grads_within_cpu16_error({&ref.dq, &ref.dk, &ref.dv}, {&cpu.dq, &cpu.dk, &cpu.dv}, {&gpu.dq, &gpu.dk, &gpu.dv});
}

class AttentionBwdGpu : public GpuTest {};

TEST_F(AttentionBwdGpu, HeadDimsAndAwkwardLengths) {
  for (const Case& c : head_dim_and_length_cases()) check(c);
}

TEST_F(AttentionBwdGpu, CausalBothAlignmentsWindowsSoftcap) {
  for (const Case& c : mask_cases()) check(c);
}

TEST_F(AttentionBwdGpu, NegativeAndZeroScales) {
  for (const Case& c : nonpositive_scale_cases()) check(c);
}

// No keys, no queries, no batch: the right outputs, and no TMA descriptor of an empty dim.
TEST_F(AttentionBwdGpu, EmptyDims) {
  expect_no_tma_refusals([] {
    for (const Case& c : empty_dim_cases()) check(c);
  });
}

TEST_F(AttentionBwdGpu, OddUnitStridesAndBroadcastKv) {
  for (const Case& c : unusual_stride_cases()) {
    check(c, GqaReduction::kAtomic);
    if (c.Hq != c.Hkv) check(c, GqaReduction::kSplit);
  }
}

TEST_F(AttentionBwdGpu, GqaAtomicAndSplitFp16AndStrides) {
  for (int64_t ratio : {1, 4, 8})
    for (GqaReduction red : {GqaReduction::kAtomic, GqaReduction::kSplit}) {
      Case c;
      c.Hkv = 2;
      c.Hq = 2 * ratio;
      c.Sq = c.Sk = 333;
      c.mask.causal = true;
      check(c, red);
    }
  Case f;
  f.dt = DType::kFloat16;
  f.Sq = f.Sk = 257;
  check(f);
  Case wide;  // the split-D kernel (D 256): GQA both ways, fp16
  wide.D = 256;
  wide.dt = DType::kFloat16;
  wide.Hq = 8;
  wide.Hkv = 2;
  wide.Sq = wide.Sk = 190;
  wide.mask.causal = true;
  check(wide, GqaReduction::kAtomic);
  check(wide, GqaReduction::kSplit);
  Case long_wide;  // D 256 without a mask, keys > 2048: the default mode's zeroed dq_accum (dq_zeroed_rule)
  long_wide.D = 256;
  long_wide.Hq = 4;
  long_wide.Hkv = 2;
  long_wide.Sq = 2100;
  long_wide.Sk = 2200;
  check(long_wide, GqaReduction::kAtomic);
  Case s;
  s.strided = true;
  s.B = 2;
  s.Sq = 200;
  s.Sk = 300;
  s.Hq = 4;
  check(s);
}

// The default mode's zeroed dq_accum (dq_zeroed_rule) with the consumers adding their dQ partials
// from registers (AttnBwdArgs::dq_direct; D64 and D128 address the tile two ways): 2048 keys without
// a mask, more with a causal mask, 2048 with one (zeroed where the memory system is fast), GQA
// both ways, and a varlen batch whose longest key sequence passes 2048.
TEST_F(AttentionBwdGpu, DqAddedByTheConsumersIntoTheZeroedAccumulator) {
  for (int64_t D : {64, 128}) {
    Case plain;
    plain.D = D;
    plain.Sq = 200;
    plain.Sk = 2048;
    plain.Hq = 4;
    plain.Hkv = 2;
    check(plain, GqaReduction::kAtomic);
    Case causal;
    causal.D = D;
    causal.Sq = 333;
    causal.Sk = 2300;
    causal.Hq = 4;
    causal.Hkv = 1;
    causal.mask.causal = true;
    check(causal, GqaReduction::kSplit);
    Case causal_2k;  // 2048 keys with a causal mask: zeroed on a fast memory system (an H200),
    causal_2k.D = D;  // with the preprocess beside the main kernel under the mask; else the claims
    causal_2k.Sq = causal_2k.Sk = 2048;
    causal_2k.Hq = 2;
    causal_2k.Hkv = 1;
    causal_2k.mask.causal = true;
    check(causal_2k, GqaReduction::kAtomic);
    Case v;
    v.D = D;
    v.lq = {70, 0, 129};
    v.lk = {2100, 3, 64};
    v.B = static_cast<int64_t>(v.lq.size());
    check(v);
  }
}

// More CTAs than SMs: the dq postprocess starts beside the main kernel's last wave and converts
// each head once that head's key tiles have counted their dQ in (AttnBwdArgs::dq_after_heads); the
// heads of the first wave are converted while the last ones still run. Both GQA reductions.
TEST_F(AttentionBwdGpu, DqConvertedPerHeadBesideTheMainKernelsLastWave) {
  for (int64_t D : {64, 128}) {
    Case c;
    c.D = D;
    c.Sq = c.Sk = 300;  // 3 key tiles a head, 192 CTAs
    c.Hq = 64;
    c.Hkv = 16;
    check(c, GqaReduction::kAtomic);
    c.mask.causal = true;
    check(c, GqaReduction::kSplit);
  }
}

// GQA's heads packed in the CTA (GqaReduction::kPacked): a CTA takes its key tile for every query
// head of the group, (query tile, head) by (query tile, head), dK / dV summed in registers. Groups
// of 2, 4 and 8; every head dim, masks, varlen with one-token and empty sequences; kAuto where the
// rule packs (16 key tiles x 17 sequences x 2 kv heads: 544 CTAs, four waves of 132 SMs; no mask:
// the preprocess beside the main kernel waits per packed head too); dK / dV bitwise equal run
// after run without the deterministic flag (no atomics in them), and a group that is not a power
// of two refused.
TEST_F(AttentionBwdGpu, GqaHeadsPackedInTheCta) {
  for (int64_t D : {64, 128, 256})
    for (bool causal : {false, true}) {
      Case c;
      c.D = D;
      c.Sq = c.Sk = 333;
      c.Hq = 8;
      c.Hkv = 2;
      c.mask.causal = causal;
      check(c, GqaReduction::kPacked);
    }
  for (int64_t hq : {4, 16}) {
    Case c;
    c.B = 2;
    c.Sq = 200;
    c.Sk = 300;
    c.Hq = hq;
    c.Hkv = 2;
    c.mask.window_left = 100;
    check(c, GqaReduction::kPacked);
  }
  Case v;
  v.lq = {1, 0, 17, 300, 128, 5};
  v.lk = {1, 7, 0, 301, 200, 5};
  v.B = static_cast<int64_t>(v.lq.size());
  v.Hq = 8;
  v.Hkv = 2;
  v.mask.causal = true;
  check(v, GqaReduction::kPacked);
  Case many;
  many.D = 64;
  many.B = 17;
  many.Sq = 64;
  many.Sk = 2048;
  many.Hq = 8;
  many.Hkv = 2;
  check(many, GqaReduction::kAuto);

  Case c;
  c.Sq = c.Sk = 400;
  c.Hq = 8;
  c.Hkv = 2;
  c.mask.causal = true;
  const Inputs in = make_inputs(c);
  HostTensor out, lse;
  cpu_run(c, in, c.dt, &out, &lse);
  Grads first;
  ASSERT_TRUE(gpu_run(c, in, out, lse, GqaReduction::kPacked, false, &first).ok());
  for (int run = 0; run < 3; ++run) {
    Grads again;
    ASSERT_TRUE(gpu_run(c, in, out, lse, GqaReduction::kPacked, false, &again).ok());
    EXPECT_EQ(first.dk.buf, again.dk.buf) << "run " << run;
    EXPECT_EQ(first.dv.buf, again.dv.buf) << "run " << run;
  }
  c.Hq = 6;  // groups of 3
  const Inputs in3 = make_inputs(c);
  cpu_run(c, in3, c.dt, &out, &lse);
  Grads g;
  const Status st = gpu_run(c, in3, out, lse, GqaReduction::kPacked, false, &g);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("gqa_reduction"), std::string::npos) << st.message();
}

TEST_F(AttentionBwdGpu, VarlenWithOneTokenAndEmptySequences) {
  for (int64_t D : {64, 128, 256})
    for (bool causal : {false, true}) {
      Case c;
      c.D = D;
      c.lq = {1, 0, 17, 300, 128, 5};
      c.lk = {1, 7, 0, 301, 200, 5};
      c.B = static_cast<int64_t>(c.lq.size());
      c.Hq = 4;
      c.Hkv = 2;
      c.mask.causal = causal;
      check(c, causal ? GqaReduction::kSplit : GqaReduction::kAtomic);
    }
}

// Deterministic mode: dQ added in key-tile order (in two chains at D 256 and at D 64 / 128 with
// keys >= 2048, else one: bwd_dispatch.cu), GQA dK / dV summed in head order. Checked against float64 with the usual rule,
// then 10 more runs bitwise equal; varlen with a window too.
TEST_F(AttentionBwdGpu, DeterministicIsBitwiseAndMatchesAtomic) {
  std::vector<Case> cases;
  for (int64_t D : {64, 128, 256}) {
    Case c;
    c.D = D;
    c.B = 2;
    c.Sq = c.Sk = 700;
    c.Hq = 8;
    c.Hkv = 2;
    c.mask.causal = true;
    cases.push_back(c);
  }
  Case two;  // keys >= 2048 at D 64 / 128: two dQ chains (bwd_dispatch.cu), causal bottom-right
  two.D = 64;
  two.Sq = 300;
  two.Sk = 2200;
  two.Hq = 4;
  two.Hkv = 2;
  two.mask.causal = true;
  cases.push_back(two);
  Case two_window;  // two chains with a left window: a query tile's first key tile is past 0
  two_window.Sq = two_window.Sk = 2100;
  two_window.mask.window_left = 300;
  cases.push_back(two_window);
  Case wide;  // D 256 without a mask: two chains, every key tile meets every query tile
  wide.D = 256;
  wide.Sq = 600;
  wide.Sk = 650;
  wide.Hq = wide.Hkv = 2;
  cases.push_back(wide);
  Case v;  // varlen, a left window: key tiles of a query tile start past the first one
  v.lq = {300, 1, 0, 517};
  v.lk = {400, 9, 5, 517};
  v.B = static_cast<int64_t>(v.lq.size());
  v.Hq = 4;
  v.Hkv = 4;
  v.mask.window_left = 150;
  cases.push_back(v);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name() + " deterministic");
    const Inputs in = make_inputs(c);
    HostTensor out64, lse64, out, lse;
    const Grads ref = cpu_run(c, in, DType::kFloat64, &out64, &lse64);
    const Grads cpu = cpu_run(c, in, c.dt, &out, &lse);
    Grads first, atomic;
    ASSERT_TRUE(gpu_run(c, in, out, lse, GqaReduction::kAtomic, true, &first).ok());
    expect_grads_within_cpu16_error({&ref.dq, &ref.dk, &ref.dv}, {&cpu.dq, &cpu.dk, &cpu.dv}, {&first.dq, &first.dk, &first.dv});
    ASSERT_TRUE(gpu_run(c, in, out, lse, GqaReduction::kAtomic, false, &atomic).ok());
    EXPECT_LE(max_abs_diff(first.dk.values(), atomic.dk.values()), 0.02 * max_abs(first.dk.values()));
    EXPECT_LE(max_abs_diff(first.dq.values(), atomic.dq.values()), 0.02 * max_abs(first.dq.values()));
    for (int run = 0; run < 10; ++run) {
      Grads again;
      ASSERT_TRUE(gpu_run(c, in, out, lse, GqaReduction::kAtomic, true, &again).ok());
      EXPECT_EQ(first.dq.buf, again.dq.buf) << "run " << run;
      EXPECT_EQ(first.dk.buf, again.dk.buf) << "run " << run;
      EXPECT_EQ(first.dv.buf, again.dv.buf) << "run " << run;
    }
  }
}

TEST_F(AttentionBwdGpu, UnsupportedHeadDimIsAClearError) {
  Case c;
  c.D = 96;  // the CPU backend takes it; the CUDA kernels are built for 64, 128 and 256
  c.Sq = c.Sk = 64;
  const Inputs in = make_inputs(c);
  HostTensor out, lse;
  cpu_run(c, in, c.dt, &out, &lse);
  Grads g;
  const Status st = gpu_run(c, in, out, lse, GqaReduction::kAtomic, false, &g);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("q:"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace attnkit::test
