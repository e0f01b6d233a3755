// tests/cpp/gdn_gpu_test.cpp — the CUDA gated delta rule decode against the CPU backend (itself
// checked against the float64 token recurrence in gdn_test.cpp): outputs NaN-poisoned, the state
// pool updated in place through state indices with a padding slot, varlen, GVA, the in-op options
// and the per-key gate. Metric: FLA's RMS(err) / RMS(ref).
#include "gdn_test_util.hpp"
#include "gpu_util.hpp"

namespace attnkit::test {
namespace {

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
  DeviceTensor q(d.q), k(d.k), v(d.v), beta(d.beta), state(pool), out(d.out);
  std::unique_ptr<DeviceTensor> g, gk, alog, dtb, didx, dcu;
  GdnData dv = d;  // device views of the same tensors
  dv.q.view = q.view;
  dv.k.view = k.view;
  dv.v.view = v.view;
  dv.beta.view = beta.view;
  if (d.g.view.defined()) { g = std::make_unique<DeviceTensor>(d.g); dv.g.view = g->view; }
  if (d.gk.view.defined()) { gk = std::make_unique<DeviceTensor>(d.gk); dv.gk.view = gk->view; }
  if (d.A_log.view.defined()) {
    alog = std::make_unique<DeviceTensor>(d.A_log);
    dtb = std::make_unique<DeviceTensor>(d.dt_bias);
    dv.A_log.view = alog->view;
    dv.dt_bias.view = dtb->view;
  }
  TensorView idx_view, cu_view;
  if (idx.view.defined()) { didx = std::make_unique<DeviceTensor>(idx); idx_view = didx->view; }
  if (d.cu.view.defined()) { dcu = std::make_unique<DeviceTensor>(d.cu); cu_view = dcu->view; }
  out.poison();
  const Status st = gdn_decode(params(dv, state.view, out.view, idx_view, cu_view));
  ASSERT_TRUE(st.ok()) << st.message();
  HostTensor out_gpu = d.out, pool_gpu = pool;
  out.copy_to(out_gpu);
  state.copy_to(pool_gpu);
  const auto o = out_gpu.values();
  ASSERT_TRUE(all_finite(o)) << "unwritten or non-finite outputs";
  EXPECT_LT(rel_rms(o, out_cpu.values()), 1e-3);
  EXPECT_LT(rel_rms(pool_gpu.values(), pool_cpu.values()), 1e-4);
}

class GdnDecodeGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(GdnDecodeGpu, TokensPerSequenceAndHeadDims) {
  for (int64_t D : {64, 128})
    for (int64_t T : {1, 3, 64}) {
      SCOPED_TRACE("D=" + std::to_string(D) + " T=" + std::to_string(T));
      DecodeCase dc;
      dc.c.dt = DType::kBFloat16;
      dc.c.B = 5;
      dc.c.T = T;
      dc.c.H = 2;
      dc.c.HV = 4;
      dc.c.K = dc.c.V = D;
      dc.c.l2norm = true;
      check_decode(dc);
    }
}

TEST_F(GdnDecodeGpu, StatePoolOptionsAndPerKeyGate) {
  DecodeCase dc;
  dc.c.dt = DType::kFloat16;
  dc.c.B = 5;
  dc.c.T = 2;
  dc.c.H = 1;
  dc.c.HV = 4;
  dc.c.K = dc.c.V = 128;
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
    DecodeCase dc;
    dc.c.dt = DType::kBFloat16;
    dc.c.B = 3;
    dc.c.T = 2;
    dc.c.HV = 4;
    dc.c.K = dc.c.V = D;
    dc.c.l2norm = true;
    dc.row_pad = 8;
    check_decode(dc);
  }
}

TEST_F(GdnDecodeGpu, VFirstStateLayout) {
  for (int64_t D : {64, 128}) {
    DecodeCase dc;
    dc.c.dt = DType::kBFloat16;
    dc.c.B = 3;
    dc.c.T = 3;
    dc.c.HV = 4;
    dc.c.K = dc.c.V = D;
    dc.c.l2norm = dc.c.fused_gate = true;
    dc.c.layout = StateLayout::kVK;
    dc.indices = {2, -1, 0};
    dc.pool = 4;
    check_decode(dc);
  }
}

TEST_F(GdnDecodeGpu, VarlenTokens) {
  DecodeCase dc;
  dc.c.dt = DType::kBFloat16;
  dc.c.seqlens = {1, 0, 4, 2};
  dc.c.T = 7;
  dc.c.HV = 2;
  dc.c.H = 2;
  dc.c.K = dc.c.V = 64;
  check_decode(dc);
}

}  // namespace
}  // namespace attnkit::test
