// tests/cpp/flex_bwd_gpu_test.cpp — the Hopper flex attention backward against the CPU backend.
//
// Reference: the CPU backend's float64 forward and backward on the same (rounded) inputs, with the
// same mods and BlockMask. The GPU backward gets the CPU backend's 16-bit forward (out, LSE), as
// the CPU backend's own 16-bit backward does. Error rule (the attention backward's): per gradient,
// the GPU's max error at most twice the CPU 16-bit run's plus 1e-3 * max(1, max |reference|).
// Gradients and the workspace are poisoned with NaN before each launch.
#include <algorithm>
#include <memory>

#include "flex_gpu_case.hpp"

namespace attnkit::test {
namespace {

struct Inputs {
  HostTensor q, k, v, dout;  // float64 holding 16-bit values
  ModTables tables;
};

Inputs make_inputs(const FlexGpuCase& c) {
  std::mt19937 rng(5);
  Inputs in{HostTensor(DType::kFloat64, {c.B, c.Hq, c.Sq, c.D}), HostTensor(DType::kFloat64, {c.B, c.Hkv, c.Sk, c.D}),
            HostTensor(DType::kFloat64, {c.B, c.Hkv, c.Sk, c.D}), HostTensor(DType::kFloat64, {c.B, c.Hq, c.Sq, c.D}), {}};
  for (HostTensor* t : {&in.q, &in.k, &in.v, &in.dout}) {
    t->randn(rng);
    *t = t->to(c.dt).to(DType::kFloat64);  // every run sees the same 16-bit values
  }
  in.tables = make_tables(c, rng);
  return in;
}

struct Grads {
  HostTensor dq, dk, dv;
};

// The CPU forward then backward in dtype dt; out / lse keep the forward's.
Grads cpu_run(const FlexGpuCase& c, const Inputs& in, DType dt, HostTensor* out, HostTensor* lse) {
  const FlexMods mods = mods_of(c, in.tables);
  const std::unique_ptr<HostBlockMask> bm = block_mask_of(c, mods);
  HostTensor q = in.q.to(dt), k = in.k.to(dt), v = in.v.to(dt), dout = in.dout.to(dt);
  *out = HostTensor(dt, {c.B, c.Hq, c.Sq, c.D});
  *lse = HostTensor(DType::kFloat32, {c.B, c.Hq, c.Sq});
  FlexFwdParams f;
  f.q = q.view;
  f.k = k.view;
  f.v = v.view;
  f.out = out->view;
  f.lse = lse->view;
  f.mods = mods;
  if (bm) f.block_mask = bm->view();
  EXPECT_TRUE(flex_attention_forward(f).ok());
  Grads g{HostTensor(dt, {c.B, c.Hq, c.Sq, c.D}), HostTensor(dt, {c.B, c.Hkv, c.Sk, c.D}), HostTensor(dt, {c.B, c.Hkv, c.Sk, c.D})};
  FlexBwdParams b;
  b.q = q.view;
  b.k = k.view;
  b.v = v.view;
  b.out = out->view;
  b.lse = lse->view;
  b.dout = dout.view;
  b.dq = g.dq.view;
  b.dk = g.dk.view;
  b.dv = g.dv.view;
  b.mods = mods;
  if (bm) b.block_mask = bm->view();
  const Status st = flex_attention_backward(b);
  EXPECT_TRUE(st.ok()) << st.message();
  return g;
}

Status gpu_run(const FlexGpuCase& c, const Inputs& in, const HostTensor& out, const HostTensor& lse, bool deterministic, Grads* g) {
  const FlexMods host_mods = mods_of(c, in.tables);
  const std::unique_ptr<HostBlockMask> bm = block_mask_of(c, host_mods);
  HostTensor q = in.q.to(c.dt), k = in.k.to(c.dt), v = in.v.to(c.dt), dout = in.dout.to(c.dt);
  *g = Grads{HostTensor(c.dt, {c.B, c.Hq, c.Sq, c.D}), HostTensor(c.dt, {c.B, c.Hkv, c.Sk, c.D}),
             HostTensor(c.dt, {c.B, c.Hkv, c.Sk, c.D})};
  DeviceTensor dq_(q), dk_(k), dv_(v), ddo(dout), dout_(out), dlse(lse), gq(g->dq), gk(g->dk), gv(g->dv);
  for (DeviceTensor* t : {&gq, &gk, &gv}) t->poison();
  const DeviceModTables dtables(in.tables);
  std::unique_ptr<DeviceBlockMask> dbm;
  FlexBwdParams p;
  p.q = dq_.view;
  p.k = dk_.view;
  p.v = dv_.view;
  p.out = dout_.view;
  p.lse = dlse.view;
  p.dout = ddo.view;
  p.dq = gq.view;
  p.dk = gk.view;
  p.dv = gv.view;
  p.mods = dtables.mods(c);
  if (bm) {
    dbm = std::make_unique<DeviceBlockMask>(*bm);
    p.block_mask = dbm->view();
  }
  p.deterministic = deterministic;
  DeviceScratch ws(flex_backward_workspace_size(p));
  p.workspace = ws.workspace();
  const Status st = flex_attention_backward(p);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (!st.ok()) return st;
  gq.copy_to(g->dq);
  gk.copy_to(g->dk);
  gv.copy_to(g->dv);
  return st;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

void check(const FlexGpuCase& c, bool deterministic = false) {
  SCOPED_TRACE(c.name() + (deterministic ? " deterministic" : ""));
  const Inputs in = make_inputs(c);
  HostTensor out64, lse64, out16, lse16;
  const Grads ref = cpu_run(c, in, DType::kFloat64, &out64, &lse64);
  const Grads cpu = cpu_run(c, in, c.dt, &out16, &lse16);
  Grads gpu;
  const Status st = gpu_run(c, in, out16, lse16, deterministic, &gpu);
  ASSERT_TRUE(st.ok()) << st.message();
  const char* names[] = {"dq", "dk", "dv"};
  const HostTensor* r[] = {&ref.dq, &ref.dk, &ref.dv};
  const HostTensor* c16[] = {&cpu.dq, &cpu.dk, &cpu.dv};
  const HostTensor* g[] = {&gpu.dq, &gpu.dk, &gpu.dv};
  for (int i = 0; i < 3; ++i) {
    const auto vr = r[i]->values(), vc = c16[i]->values(), vg = g[i]->values();
    ASSERT_TRUE(all_finite(vg)) << names[i] << ": unwritten or non-finite values";
    const double cpu_err = max_abs_diff(vc, vr), gpu_err = max_abs_diff(vg, vr);
    EXPECT_LE(gpu_err, 2 * cpu_err + 1e-3 * std::max(1.0, max_abs(vr)))
        << names[i] << ": gpu max err " << gpu_err << " vs cpu-16bit " << cpu_err << " (max |ref| " << max_abs(vr) << ")";
  }
}

class FlexBwdGpu : public GpuTest {};

TEST_F(FlexBwdGpu, NoModsHeadDimsAndAwkwardLengths) {
  for (int64_t D : {64, 128, 256})
    for (auto [sq, sk] : {std::pair{1, 17}, std::pair{63, 65}, std::pair{127, 1000}, std::pair{300, 129}}) {
      FlexGpuCase c;
      c.D = D;
      c.Sq = sq;
      c.Sk = sk;
      c.block_mask = 0;
      check(c);
    }
}

TEST_F(FlexBwdGpu, EveryCatalogModWithBlockMasks) {
  auto base = [] {
    FlexGpuCase c;
    c.Sq = 333;
    c.Sk = 400;
    return c;
  };
  std::vector<FlexGpuCase> cases;
  FlexGpuCase c = base();
  c.causal = true;
  cases.push_back(c);
  c.full_blocks = false;  // every visited block partial
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.window = 100;  // sliding window
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.prefix = true;  // prefix-LM
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.document = true;  // document masking
  cases.push_back(c);
  c = base();
  c.document = true;
  c.block_mask = 0;  // no BlockMask: mask_mod everywhere
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.alibi = true;
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.softcap = 20;  // a gradient through a score mod's own derivative
  cases.push_back(c);
  c = base();
  c.rel_bias = true;  // needs Sq <= Sk
  c.softcap = 5;
  c.alibi = true;
  c.block_mask = 2;  // broadcast over B and H
  cases.push_back(c);
  c.D = 256;
  c.softcap = 2;  // strong capping: the derivative is far from 1
  cases.push_back(c);
  for (const FlexGpuCase& x : cases) check(x);
}

TEST_F(FlexBwdGpu, GqaRatiosFp16AndWideBlocks) {
  for (int64_t ratio : {1, 4, 8}) {
    FlexGpuCase c;
    c.Hkv = 2;
    c.Hq = 2 * ratio;
    c.causal = true;
    check(c);
  }
  FlexGpuCase f;
  f.dt = DType::kFloat16;
  f.causal = true;
  f.window = 50;
  f.D = 64;
  check(f);
  FlexGpuCase w;  // a 256-wide key block spans two key tiles
  w.Sk = 700;
  w.block_k = 256;
  w.causal = true;
  w.document = true;
  check(w);
  w.D = 256;  // D256's key tile is 64 wide: four per 256 block, two per 128 block
  check(w);
  w.block_k = 128;
  check(w);
}

// Unlisted blocks are skipped and full blocks skip mask_mod: each head lists only the key blocks
// (kb + h) even, all as full, while mods.causal is on — causal must not be applied to them.
TEST_F(FlexBwdGpu, UnlistedBlocksSkippedAndFullBlocksSkipMaskMod) {
  FlexGpuCase c;
  c.Sq = c.Sk = 512;
  c.causal = true;
  c.block_pattern = [](int64_t, int64_t h, int64_t, int64_t j) { return ((j / 128) + h) % 2 == 0; };
  check(c);
}

// deterministic: dQ partials in key-tile order (the BlockMask's turns) and GQA sums in head order —
// ten runs bitwise equal, and within the error rule.
TEST_F(FlexBwdGpu, DeterministicIsBitwise) {
  std::vector<FlexGpuCase> cases(3);
  cases[0].Sq = cases[0].Sk = 700;  // GQA 2, causal BlockMask with full blocks, 256-wide key blocks
  cases[0].causal = true;
  cases[0].block_k = 256;
  cases[1].Sq = 500;  // no BlockMask, documents, D64
  cases[1].Sk = 650;
  cases[1].document = true;
  cases[1].block_mask = 0;
  cases[1].D = 64;
  cases[2].Sq = cases[2].Sk = 512;  // the sparse pattern, D256
  cases[2].D = 256;
  cases[2].block_pattern = [](int64_t, int64_t h, int64_t, int64_t j) { return ((j / 128) + h) % 2 == 0; };
  for (const FlexGpuCase& c : cases) {
    SCOPED_TRACE(c.name());
    check(c, true);
    const Inputs in = make_inputs(c);
    HostTensor out, lse;
    cpu_run(c, in, c.dt, &out, &lse);
    Grads first;
    ASSERT_TRUE(gpu_run(c, in, out, lse, true, &first).ok());
    for (int run = 1; run < 10; ++run) {
      Grads again;
      ASSERT_TRUE(gpu_run(c, in, out, lse, true, &again).ok());
      ASSERT_EQ(again.dq.buf, first.dq.buf) << "dq differs on run " << run;
      ASSERT_EQ(again.dk.buf, first.dk.buf) << "dk differs on run " << run;
      ASSERT_EQ(again.dv.buf, first.dv.buf) << "dv differs on run " << run;
    }
  }
}

TEST_F(FlexBwdGpu, UnsupportedBlockSizesAreRefused) {
  FlexGpuCase c;
  c.Sq = c.Sk = 256;
  c.block_k = 64;  // the D128 backward's key tile is 128 wide
  c.causal = true;
  const Inputs in = make_inputs(c);
  HostTensor out, lse;
  cpu_run(c, in, c.dt, &out, &lse);
  Grads g;
  const Status st = gpu_run(c, in, out, lse, false, &g);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("block_mask.block_k"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace attnkit::test
