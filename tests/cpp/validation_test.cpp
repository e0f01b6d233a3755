// tests/cpp/validation_test.cpp — one test per class of bad input. Every error must be
// InvalidArgument and its message must name the argument at fault.
#include <limits>

#include "gdn_test_util.hpp"

namespace attnkit::test {
namespace {

void expect_invalid(const Status& st, const std::string& arg, const std::string& detail = "") {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_EQ(st.message().rfind(arg + ":", 0), 0u) << "message should start with '" << arg << ":' but is: " << st.message();
  if (!detail.empty()) EXPECT_NE(st.message().find(detail), std::string::npos) << st.message();
}

// A valid dense attention problem that each test breaks in one way.
struct Attn {
  HostTensor q{DType::kBFloat16, {2, 16, 4, 64}}, k{DType::kBFloat16, {2, 24, 2, 64}}, v{DType::kBFloat16, {2, 24, 2, 64}};
  HostTensor out{DType::kBFloat16, {2, 16, 4, 64}}, lse{DType::kFloat32, {2, 4, 16}};
  AttentionFwdParams p() {
    AttentionFwdParams r;
    r.q = q.view;
    r.k = k.view;
    r.v = v.view;
    r.out = out.view;
    r.lse = lse.view;
    return r;
  }
};

TEST(Validation, ValidProblemPasses) {
  Attn a;
  ASSERT_OK(attention_forward(a.p()));
}

TEST(Validation, MissingTensor) {
  Attn a;
  auto p = a.p();
  p.out = {};
  expect_invalid(attention_forward(p), "out", "required");
}

TEST(Validation, WrongNumberOfDims) {
  Attn a;
  auto p = a.p();
  p.q.ndim = 3;
  expect_invalid(attention_forward(p), "q", "4 dims");
}

TEST(Validation, DtypeMismatchAndIntegerData) {
  Attn a;
  HostTensor k32(DType::kFloat32, {2, 24, 2, 64});
  auto p = a.p();
  p.k = k32.view;
  expect_invalid(attention_forward(p), "k", "dtype of q");
  HostTensor qi(DType::kInt32, {2, 16, 4, 64});
  p = a.p();
  p.q = qi.view;
  expect_invalid(attention_forward(p), "q", "float16");
  p = a.p();
  p.lse = HostTensor(DType::kBFloat16, {2, 4, 16}).view;
  expect_invalid(attention_forward(p), "lse", "float32");
}

TEST(Validation, DeviceMismatch) {
  Attn a;
  auto p = a.p();
  p.v.device = Device::cuda(0);
  expect_invalid(attention_forward(p), "v", "cpu");
}

TEST(Validation, NonUnitLastStride) {
  Attn a;
  HostTensor wide(DType::kBFloat16, {2, 16, 4, 128});
  auto p = a.p();
  p.q = wide.view;
  p.q.sizes[3] = 64;
  p.q.strides[3] = 2;
  expect_invalid(attention_forward(p), "q", "unit stride");
}

TEST(Validation, ShapeMismatches) {
  Attn a;
  auto p = a.p();
  HostTensor k2(DType::kBFloat16, {2, 24, 2, 32});
  p.k = k2.view;
  expect_invalid(attention_forward(p), "k", "D (q's head dim)");
  p = a.p();
  HostTensor b3(DType::kBFloat16, {3, 24, 2, 64});
  p.k = b3.view;
  expect_invalid(attention_forward(p), "k", "B (q.size(0))");
  p = a.p();
  p.lse = HostTensor(DType::kFloat32, {2, 16, 4}).view;
  expect_invalid(attention_forward(p), "lse", "[B, Hq, Sq]");
}

TEST(Validation, HeadDivisibilityAndHeadDim) {
  Attn a;
  HostTensor q3(DType::kBFloat16, {2, 16, 3, 64}), o3(DType::kBFloat16, {2, 16, 3, 64});
  auto p = a.p();
  p.q = q3.view;
  p.out = o3.view;
  p.lse = {};
  expect_invalid(attention_forward(p), "q (head count Hq)", "multiple of Hkv");
  HostTensor q0(DType::kBFloat16, {2, 16, 4, 1024}), k0(DType::kBFloat16, {2, 24, 2, 1024});
  p = a.p();
  p.q = q0.view;
  p.k = k0.view;
  expect_invalid(attention_forward(p), "q (head dim D)", "[1, 512]");
}

TEST(Validation, WindowSoftcapScale) {
  Attn a;
  auto p = a.p();
  p.mask.window_left = -2;
  expect_invalid(attention_forward(p), "mask.window_left", ">= -1");
  p = a.p();
  p.softcap = -1;
  expect_invalid(attention_forward(p), "softcap", ">= 0");
  p = a.p();
  p.scale = std::numeric_limits<double>::quiet_NaN();
  expect_invalid(attention_forward(p), "scale", "finite");
}

TEST(Validation, CuSeqlens) {
  HostTensor q(DType::kBFloat16, {10, 4, 64}), k(DType::kBFloat16, {12, 2, 64}), v(DType::kBFloat16, {12, 2, 64});
  HostTensor out(DType::kBFloat16, {10, 4, 64});
  auto run = [&](std::vector<int64_t> cq, std::vector<int64_t> ck, DType dt = DType::kInt32, int64_t maxq = 0) {
    HostTensor a = index_tensor(dt, cq), b = index_tensor(dt, ck);
    AttentionFwdParams p;
    p.q = q.view;
    p.k = k.view;
    p.v = v.view;
    p.out = out.view;
    p.cu_seqlens_q = a.view;
    p.cu_seqlens_k = b.view;
    p.max_seqlen_q = maxq;
    return attention_forward(p);
  };
  ASSERT_OK(run({0, 4, 10}, {0, 6, 12}));
  expect_invalid(run({1, 4, 10}, {0, 6, 12}), "cu_seqlens_q", "first offset");
  expect_invalid(run({0, 7, 4, 10}, {0, 6, 6, 12}), "cu_seqlens_q", "non-decreasing");
  expect_invalid(run({0, 4, 9}, {0, 6, 12}), "cu_seqlens_q", "last offset");
  expect_invalid(run({0, 4, 10}, {0, 6, 11}), "cu_seqlens_k", "last offset");
  expect_invalid(run({0, 4, 10}, {0, 6, 12}, DType::kInt64), "cu_seqlens_q", "int32");
  expect_invalid(run({0, 4, 10}, {0, 12}), "cu_seqlens_k", "N+1");
  expect_invalid(run({0, 4, 10}, {0, 6, 12}, DType::kInt32, 5), "cu_seqlens_q", "max_seqlen_q");
}

TEST(Validation, BackwardNeedsLseAndMatchingGradients) {
  Attn a;
  HostTensor dout(DType::kBFloat16, {2, 16, 4, 64}), dq(DType::kBFloat16, {2, 16, 4, 64});
  HostTensor dk(DType::kBFloat16, {2, 24, 2, 64}), dv(DType::kBFloat16, {2, 24, 2, 32});
  AttentionBwdParams p;
  p.q = a.q.view;
  p.k = a.k.view;
  p.v = a.v.view;
  p.out = a.out.view;
  p.dout = dout.view;
  p.dq = dq.view;
  p.dk = dk.view;
  p.dv = dv.view;
  expect_invalid(attention_backward(p), "lse", "required");
  p.lse = a.lse.view;
  expect_invalid(attention_backward(p), "dv", "shape of v");
}

TEST(Validation, Workspace) {
  Attn a;
  auto p = a.p();
  p.workspace.bytes = 0;
  ASSERT_OK(attention_forward(p));  // the CPU backend needs none
  // The CUDA forward needs its scheduler counter: refused before any launch when missing.
  for (TensorView* t : {&p.q, &p.k, &p.v, &p.out, &p.lse}) t->device = Device::cuda(0);
  EXPECT_EQ(attention_forward_workspace_size(p), 16u);
  expect_invalid(attention_forward(p), "workspace", "at least 16 bytes");
}

// ---- flex ----

TEST(Validation, FlexModsAndBlockMask) {
  HostTensor q(DType::kFloat32, {1, 2, 40, 16}), k(DType::kFloat32, {1, 2, 40, 16}), v(DType::kFloat32, {1, 2, 40, 16});
  HostTensor out(DType::kFloat32, {1, 2, 40, 16});
  auto base = [&] {
    FlexFwdParams p;
    p.q = q.view;
    p.k = k.view;
    p.v = v.view;
    p.out = out.view;
    return p;
  };
  ASSERT_OK(flex_attention_forward(base()));
  FlexFwdParams p = base();
  HostTensor prefix(DType::kInt32, {1});
  p.mods.prefix_lengths = prefix.view;
  expect_invalid(flex_attention_forward(p), "mods.prefix_lengths", "causal");
  p = base();
  HostTensor slopes(DType::kFloat32, {3});
  p.mods.alibi_slopes = slopes.view;
  expect_invalid(flex_attention_forward(p), "mods.alibi_slopes", "Hq");
  p = base();
  HostTensor doc(DType::kInt32, {1, 40});
  p.mods.document_ids_q = doc.view;
  expect_invalid(flex_attention_forward(p), "mods.document_ids_kv", "both");
  p = base();
  p.mods.softcap = -3;
  expect_invalid(flex_attention_forward(p), "mods.softcap", ">= 0");
  p = base();
  p.num_splits = -1;
  expect_invalid(flex_attention_forward(p), "num_splits", ">= 0");
  p.num_splits = 5;  // the CPU backend has no split-KV path: ignored, same result
  ASSERT_OK(flex_attention_forward(p));

  // BlockMask: 40 tokens with 16-wide blocks -> 3 x 3 blocks.
  HostTensor num(DType::kInt32, {1, 1, 3}), idx(DType::kInt32, {1, 1, 3, 3});
  p = base();
  p.block_mask.block_q = p.block_mask.block_k = 16;
  p.block_mask.kv_num_blocks = num.view;
  p.block_mask.kv_indices = idx.view;
  ASSERT_OK(flex_attention_forward(p));
  HostTensor num_bad(DType::kInt32, {1, 1, 2});
  p.block_mask.kv_num_blocks = num_bad.view;
  expect_invalid(flex_attention_forward(p), "block_mask.kv_num_blocks", "row blocks");
  p.block_mask.kv_num_blocks = num.view;
  num.set(1, 4);
  expect_invalid(flex_attention_forward(p), "block_mask.kv_num_blocks", "counts in [0, 3]");
  num.set(1, 2);
  idx.set(3 + 1, 3);
  expect_invalid(flex_attention_forward(p), "block_mask.kv_indices", "block indices in [0, 3)");
  idx.set(3 + 1, 0);
  HostTensor heads3(DType::kInt32, {1, 3, 3}), heads3_idx(DType::kInt32, {1, 3, 3, 3});
  p.block_mask.kv_num_blocks = heads3.view;
  p.block_mask.kv_indices = heads3_idx.view;
  expect_invalid(flex_attention_forward(p), "block_mask.kv_num_blocks", "Hq or 1");
  p = base();
  p.block_mask.kv_indices = idx.view;
  expect_invalid(flex_attention_forward(p), "block_mask.kv_num_blocks", "required");
}

// ---- gated delta rule ----

TEST(Validation, GdnShapesGatesAndStates) {
  GdnCase c;
  c.dt = DType::kBFloat16;
  GdnData d = make_gdn(c, 1);
  auto base = [&] {
    GdnFwdParams p;
    p.in = gdn_inputs(c, d);
    p.out = d.out.view;
    p.final_state = d.ht.view;
    return p;
  };
  ASSERT_OK(gdn_forward(base()));
  GdnFwdParams p = base();
  HostTensor g_bad(DType::kFloat32, {1, c.T, c.HV + 1});
  p.in.g = g_bad.view;
  expect_invalid(gdn_forward(p), "g", "[B, T, HV]");
  p = base();
  HostTensor beta_bad(DType::kFloat32, {1, c.T});
  p.in.beta = beta_bad.view;
  expect_invalid(gdn_forward(p), "beta", "3 dims");
  p = base();
  HostTensor gk(DType::kFloat32, {1, c.T, c.HV, c.K});
  p.in.gk = gk.view;
  expect_invalid(gdn_forward(p), "gk", "not both");
  p = base();
  HostTensor alog(DType::kFloat32, {c.HV});
  p.in.A_log = alog.view;
  expect_invalid(gdn_forward(p), "dt_bias", "both A_log and dt_bias");
  p = base();
  HostTensor h0_bad(DType::kFloat32, {1, c.HV, c.V + 1, c.K});
  p.in.initial_state = h0_bad.view;
  expect_invalid(gdn_forward(p), "initial_state", "[N, HV, K, V]");
  p = base();
  HostTensor ht16(DType::kBFloat16, state_shape(c));
  p.final_state = ht16.view;
  expect_invalid(gdn_forward(p), "final_state", "float32");
  p = base();
  HostTensor v3(DType::kBFloat16, {1, c.T, 3, c.V}), out3(DType::kBFloat16, {1, c.T, 3, c.V});
  p.in.v = v3.view;
  p.out = out3.view;
  expect_invalid(gdn_forward(p), "v (value head count HV)", "multiple of H");
  p = base();
  HostTensor cu = index_tensor(DType::kInt64, {0, 30, 69});
  p.in.cu_seqlens = cu.view;
  expect_invalid(gdn_forward(p), "cu_seqlens", "last offset");
  HostTensor cu32 = index_tensor(DType::kInt32, {0, 30, 70});
  p.in.cu_seqlens = cu32.view;
  expect_invalid(gdn_forward(p), "cu_seqlens", "int64");
}

// GdnFwdParams / GdnBwdParams::intermediates: none kept on the CPU; on CUDA exactly
// gdn_intermediates_size() bytes, 256-byte aligned (refused before anything launches).
TEST(Validation, GdnIntermediates) {
  GdnCase c;
  c.dt = DType::kBFloat16;
  c.K = c.V = 64;
  c.h0 = false;
  GdnData d = make_gdn(c, 5);
  GdnFwdParams p;
  p.in = gdn_inputs(c, d);
  p.out = d.out.view;
  alignas(256) static unsigned char buffer[256];
  EXPECT_EQ(gdn_intermediates_size(p.in), 0u);
  p.intermediates = {buffer, sizeof(buffer)};
  expect_invalid(gdn_forward(p), "intermediates", "pass none");

  for (TensorView* t : {&p.in.q, &p.in.k, &p.in.v, &p.in.g, &p.in.beta, &p.out}) t->device = Device::cuda(0);
  const size_t need = gdn_intermediates_size(p.in);
  if (need == 0) GTEST_SKIP() << "a build without CUDA kernels keeps nothing";
  EXPECT_EQ(need % 256, 0u);
  void* fake = reinterpret_cast<void*>(uintptr_t{1} << 20);  // never dereferenced: refused first
  p.intermediates = {fake, need - 256};
  expect_invalid(gdn_forward(p), "intermediates", "expected gdn_intermediates_size() = " + std::to_string(need));
  p.intermediates = {static_cast<char*>(fake) + 16, need};
  expect_invalid(gdn_forward(p), "intermediates", "256-byte aligned");

  // The backward checks the same buffer the same way.
  const Cotangents ct = make_cotangents(c, 6);
  GdnGrads g = make_grads(d);
  GdnBwdParams b = gdn_bwd_params(c, d, ct, g);
  for (TensorView* t : {&b.in.q, &b.in.k, &b.in.v, &b.in.g, &b.in.beta, &b.dout, &b.dfinal_state, &b.dq, &b.dk, &b.dv,
                        &b.dbeta, &b.dg})
    t->device = Device::cuda(0);
  b.intermediates = {fake, need + 256};
  expect_invalid(gdn_backward(b), "intermediates", "expected gdn_intermediates_size() = " + std::to_string(need));

  // T alone (GdnKeep::kT): its own, smaller size — a buffer of the other kind is refused — and T's
  // 64 16-bit values a token and value head.
  const size_t need_t = gdn_intermediates_size(p.in, GdnKeep::kT);
  EXPECT_EQ(need_t, size_t(c.B * c.T * c.HV * 64 * 2 + 255) / 256 * 256);
  EXPECT_LT(need_t, need);
  p.keep = b.keep = GdnKeep::kT;
  p.intermediates = {fake, need};
  expect_invalid(gdn_forward(p), "intermediates", "expected gdn_intermediates_size() = " + std::to_string(need_t) + " bytes (keep = kT)");
  b.intermediates = {fake, need};
  expect_invalid(gdn_backward(b), "intermediates", "expected gdn_intermediates_size() = " + std::to_string(need_t) + " bytes (keep = kT)");
  p.keep = static_cast<GdnKeep>(7);
  expect_invalid(gdn_forward(p), "keep", "GdnKeep::kAll or GdnKeep::kT");
}

// GdnFwdParams / GdnBwdParams::num_segments: 0, 1 or a count; a negative one is refused on any
// backend (the CPU ignores the split but not a wrong argument).
TEST(Validation, GdnNegativeSegmentCount) {
  GdnCase c;
  c.h0 = false;
  GdnData d = make_gdn(c, 9);
  GdnFwdParams p;
  p.in = gdn_inputs(c, d);
  p.out = d.out.view;
  p.num_segments = 3;
  ASSERT_OK(gdn_forward(p));
  p.num_segments = -1;
  expect_invalid(gdn_forward(p), "num_segments", "segment count, got -1");
  const Cotangents ct = make_cotangents(c, 10);
  GdnGrads g = make_grads(d);
  GdnBwdParams b = gdn_bwd_params(c, d, ct, g);
  b.num_segments = -2;
  expect_invalid(gdn_backward(b), "num_segments", "segment count, got -2");
}

TEST(Validation, GdnVarlenNeedsBatchOne) {
  GdnCase c;
  c.B = 2;
  GdnData d = make_gdn(c, 2);
  GdnFwdParams p;
  p.in = gdn_inputs(c, d);
  p.out = d.out.view;
  HostTensor cu = index_tensor(DType::kInt64, {0, 70});
  p.in.cu_seqlens = cu.view;
  expect_invalid(gdn_forward(p), "q", "B == 1");
}

TEST(Validation, GdnDecodeStateIndices) {
  GdnCase c;
  c.B = 2;
  c.T = 1;
  GdnData d = make_gdn(c, 3);
  HostTensor pool(DType::kFloat32, {4, c.HV, c.K, c.V});
  auto run = [&](std::vector<int64_t> idx) {
    HostTensor i = index_tensor(DType::kInt64, idx);
    GdnDecodeParams p;
    p.q = d.q.view;
    p.k = d.k.view;
    p.v = d.v.view;
    p.beta = d.beta.view;
    p.g = d.g.view;
    p.state = pool.view;
    p.state_indices = i.view;
    p.out = d.out.view;
    return gdn_decode(p);
  };
  ASSERT_OK(run({3, 0}));
  expect_invalid(run({3, 4}), "state_indices", "slots < 4");
  expect_invalid(run({2, 2}), "state_indices", "two sequences");
  expect_invalid(run({1}), "state_indices", "N, the number of sequences");
}

TEST(Validation, GdnBwdDhuShapes) {
  const int64_t B = 1, T = 70, H = 2, HV = 4, K = 8, V = 8;  // 2 chunks of 64
  HostTensor q(DType::kFloat32, {B, T, H, K}), k(DType::kFloat32, {B, T, H, K}), w(DType::kFloat32, {B, T, HV, K});
  HostTensor dout(DType::kFloat32, {B, T, HV, V}), dv(DType::kFloat32, {B, T, HV, V}), dv2(DType::kFloat32, {B, T, HV, V});
  HostTensor dh(DType::kFloat32, {B, 2, HV, K, V}), dh_bad(DType::kFloat32, {B, 1, HV, K, V}), g(DType::kFloat32, {B, T, HV});
  auto base = [&] {
    GdnBwdDhuParams p;
    p.q = q.view;
    p.k = k.view;
    p.w = w.view;
    p.dout = dout.view;
    p.dv = dv.view;
    p.g = g.view;
    p.dh = dh.view;
    p.dv2 = dv2.view;
    return p;
  };
  ASSERT_OK(gdn_bwd_dhu(base()));
  GdnBwdDhuParams p = base();
  p.dh = dh_bad.view;
  expect_invalid(gdn_bwd_dhu(p), "dh", "[B, NT, HV, K, V]");
  p = base();
  HostTensor w_bad(DType::kFloat32, {B, T, H, K});
  p.w = w_bad.view;
  expect_invalid(gdn_bwd_dhu(p), "w", "[B, T, HV, K]");
  p = base();
  HostTensor gk(DType::kFloat32, {B, T, HV, K});
  p.gk = gk.view;
  expect_invalid(gdn_bwd_dhu(p), "gk", "not both");
}

TEST(Validation, CudaTensorsWithoutKernelsAreUnsupportedNotCrashes) {
  // The GDN ops have no CUDA kernel yet: CUDA tensors must get kUnsupported, not a launch.
  GdnCase c;
  c.dt = DType::kBFloat16;
  GdnData d = make_gdn(c, 4);
  GdnFwdParams p;
  p.in = gdn_inputs(c, d);
  p.out = d.out.view;
  for (TensorView* t : {&p.in.q, &p.in.k, &p.in.v, &p.in.g, &p.in.beta, &p.in.initial_state, &p.out})
    t->device = Device::cuda(0);
  const Status st = gdn_forward(p);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
}

}  // namespace
}  // namespace attnkit::test
