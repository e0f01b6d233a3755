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
  f.scale = c.scale;
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
  b.scale = c.scale;
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
  p.scale = c.scale;
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

void check(const FlexGpuCase& c, bool deterministic = false) {
  SCOPED_TRACE(c.name() + (deterministic ? " deterministic" : ""));
  const Inputs in = make_inputs(c);
  HostTensor out64, lse64, out16, lse16;
  const Grads ref = cpu_run(c, in, DType::kFloat64, &out64, &lse64);
  const Grads cpu = cpu_run(c, in, c.dt, &out16, &lse16);
  Grads gpu;
  const Status st = gpu_run(c, in, out16, lse16, deterministic, &gpu);
  ASSERT_TRUE(st.ok()) << st.message();
  expect_grads_within_cpu16_error({&ref.dq, &ref.dk, &ref.dv}, {&cpu.dq, &cpu.dk, &cpu.dv}, {&gpu.dq, &gpu.dk, &gpu.dv});
}

class FlexBwdGpu : public GpuTest {};

// (Without a BlockMask these run on the softmax attention backward's instantiations: bwd_dispatch.cu.)
TEST_F(FlexBwdGpu, NoModsHeadDimsAndAwkwardLengths) {
  for (const FlexGpuCase& c : no_mod_cases()) check(c);
}

TEST_F(FlexBwdGpu, EveryCatalogModWithBlockMasks) {
  std::vector<FlexGpuCase> cases = catalog_cases();
  FlexGpuCase c = cases.back();  // rel_bias + ALiBi + softcap, broadcast BlockMask
  c.D = 256;
  c.softcap = 2;  // strong capping: the derivative is far from 1
  cases.push_back(c);
  for (const FlexGpuCase& x : cases) check(x);
}

TEST_F(FlexBwdGpu, NegativeAndZeroScales) {
  for (const FlexGpuCase& c : nonpositive_scale_cases()) check(c);
}

TEST_F(FlexBwdGpu, GqaRatiosFp16AndWideBlocks) {
  for (const FlexGpuCase& c : gqa_and_block_width_cases()) check(c);
  FlexGpuCase f;
  f.dt = DType::kFloat16;
  f.causal = true;
  f.window = 50;
  f.D = 64;
  check(f);
}

TEST_F(FlexBwdGpu, UnlistedBlocksSkippedAndFullBlocksSkipMaskMod) { check(sparse_pattern_case()); }

// A mod without a BlockMask past 2048 keys at D64: the default mode zeroes dq_accum and the
// consumers add their dQ partials from registers (AttnBwdArgs::dq_direct).
TEST_F(FlexBwdGpu, DqAddedByTheConsumersWithoutABlockMask) {
  FlexGpuCase c;
  c.D = 64;
  c.Sq = 150;
  c.Sk = 2200;
  c.document = true;
  c.block_mask = 0;
  check(c);
}

// deterministic: dQ partials in key-tile order (the BlockMask's turns) and GQA sums in head order —
// ten runs bitwise equal, and within the error rule. The document cases also take the launch order
// of launch_order.hpp's all_heads_group_log2.
TEST_F(FlexBwdGpu, DeterministicIsBitwise) {
  std::vector<FlexGpuCase> cases(3);
  cases.push_back(sparse_pattern_case());  // D128: full blocks above the diagonal (mask_mod skipped), in the ordered lists
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
  FlexGpuCase docs;  // documents and causal through a BlockMask, 8 heads: launched all heads in one group
  docs.Sq = docs.Sk = 640;
  docs.Hq = docs.Hkv = 8;
  docs.document = true;
  docs.causal = true;
  cases.push_back(docs);
  FlexGpuCase plain;  // no mods, no BlockMask: the softmax attention backward runs it
  plain.Sq = plain.Sk = 700;
  plain.block_mask = 0;
  cases.push_back(plain);
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
