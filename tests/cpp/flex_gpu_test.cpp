// tests/cpp/flex_gpu_test.cpp — the Hopper flex attention forward against the CPU backend.
//
// Reference: the CPU backend in float64 on the same (rounded) inputs, with the same mods and
// BlockMask. Error rule (as the attention forward's): the GPU error may be at most twice the CPU
// backend's own 16-bit run's error plus a small absolute term; LSE to 2e-3 relative, -inf where
// the reference row is empty. Outputs and the workspace are poisoned with NaN before each launch.
#include <algorithm>
#include <memory>
#include <tuple>

#include "flex_gpu_case.hpp"
#include "src/cuda/flex/split_plan.hpp"

namespace attnkit::test {
namespace {

struct Run {
  HostTensor out, lse;
};

Run run(const FlexGpuCase& c, const HostTensor& q, const HostTensor& k, const HostTensor& v, const ModTables& tables, DType dt,
        bool on_gpu) {
  HostTensor qh = q.to(dt), kh = k.to(dt), vh = v.to(dt);
  Run r{HostTensor(dt, {c.B, c.Hq, c.Sq, c.D}), HostTensor(DType::kFloat32, {c.B, c.Hq, c.Sq})};
  const FlexMods host_mods = mods_of(c, tables);
  const std::unique_ptr<HostBlockMask> bm = block_mask_of(c, host_mods);
  FlexFwdParams p;
  p.scale = c.scale;
  if (!on_gpu) {
    p.q = qh.view;
    p.k = kh.view;
    p.v = vh.view;
    p.out = r.out.view;
    p.lse = r.lse.view;
    p.mods = host_mods;
    if (bm) p.block_mask = bm->view();
    const Status st = flex_attention_forward(p);
    EXPECT_TRUE(st.ok()) << st.message();
    return r;
  }
  DeviceTensor dq(qh), dk(kh), dv(vh), dout(r.out), dlse(r.lse);
  const DeviceModTables dtables(tables);
  dout.poison();
  dlse.poison();
  p.q = dq.view;
  p.k = dk.view;
  p.v = dv.view;
  p.out = dout.view;
  p.lse = dlse.view;
  p.mods = dtables.mods(c);
  std::unique_ptr<DeviceBlockMask> dbm;
  if (bm) {
    dbm = std::make_unique<DeviceBlockMask>(*bm);
    p.block_mask = dbm->view();
  }
  p.num_splits = c.num_splits;
  if (c.odd_unit_strides)
    for (TensorView* t : {&p.q, &p.k, &p.v, &p.out, &p.lse}) set_odd_unit_strides(*t);
  DeviceScratch ws(flex_forward_workspace_size(p));
  p.workspace = ws.workspace();
  const Status st = flex_attention_forward(p);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(r.out);
  dlse.copy_to(r.lse);
  return r;
}

void check(const FlexGpuCase& c) {
  SCOPED_TRACE(c.name());
  std::mt19937 rng(11);
  HostTensor q(DType::kFloat64, {c.B, c.Hq, c.Sq, c.D}), k(DType::kFloat64, {c.B, c.Hkv, c.Sk, c.D}),
      v(DType::kFloat64, {c.B, c.Hkv, c.Sk, c.D});
  q.randn(rng);
  k.randn(rng);
  v.randn(rng);
  q = q.to(c.dt).to(DType::kFloat64);  // every run sees the same 16-bit values
  k = k.to(c.dt).to(DType::kFloat64);
  v = v.to(c.dt).to(DType::kFloat64);
  const ModTables tables = make_tables(c, rng);
  Run ref = run(c, q, k, v, tables, DType::kFloat64, false);
  Run cpu16 = run(c, q, k, v, tables, c.dt, false);
  Run gpu = run(c, q, k, v, tables, c.dt, true);
  expect_forward_within_cpu16_error(ref.out.values(), cpu16.out.values(), gpu.out.values(), ref.lse.values(),
                                    gpu.lse.values());
}

class FlexGpu : public GpuTest {};

TEST_F(FlexGpu, NoModsHeadDimsAndAwkwardLengths) {
  for (const FlexGpuCase& c : no_mod_cases()) check(c);
}

TEST_F(FlexGpu, EveryCatalogModWithBlockMasks) {
  for (const FlexGpuCase& c : catalog_cases()) check(c);
}

TEST_F(FlexGpu, NegativeAndZeroScales) {
  for (const FlexGpuCase& c : nonpositive_scale_cases()) check(c);
  FlexGpuCase s;  // the short-query split path: decode, 4 parts, the query's document 600 of 3000 keys
  s.Sq = 1;
  s.Sk = 3000;
  s.scale = -3.0;
  s.document = true;
  s.num_splits = 4;
  check(s);
}

TEST_F(FlexGpu, GqaRatiosFp16AndWideBlocks) {
  for (const FlexGpuCase& c : gqa_and_block_width_cases()) check(c);
  FlexGpuCase f;
  f.dt = DType::kFloat16;
  f.causal = true;
  f.window = 50;
  check(f);
}

// B = 1 with one KV head (and one query head, or four: the short-query path packs them) whose
// size-1 dims carry odd strides: the TMA descriptors must still describe them.
TEST_F(FlexGpu, OddUnitStrides) {
  for (auto [hq, sq, sk] : {std::tuple{1, 300, 300}, std::tuple{4, 300, 300}, std::tuple{4, 16, 700}})
    for (int64_t D : {64, 128}) {
      FlexGpuCase c;
      c.B = 1;
      c.Hq = hq;
      c.Hkv = 1;
      c.Sq = sq;
      c.Sk = sk;
      c.D = D;
      c.causal = sq == sk;
      c.odd_unit_strides = true;
      check(c);
    }
}

// No keys (every row empty: O = 0, LSE = -inf), no queries, no batch; short queries without keys
// too (the split-KV plan). Also: no TMA descriptor of an empty dim (the driver refuses it and CuTe
// prints the refusal to stderr).
TEST_F(FlexGpu, EmptyDims) {
  expect_no_tma_refusals([] {
    for (auto [b, sq, sk] : {std::tuple{2, 300, 0}, std::tuple{2, 16, 0}, std::tuple{2, 0, 300}, std::tuple{0, 300, 300}})
      for (int64_t D : {64, 128}) {
        FlexGpuCase c;
        c.B = b;
        c.Sq = sq;
        c.Sk = sk;
        c.D = D;
        c.block_mask = 0;
        check(c);
      }
  });
}

TEST_F(FlexGpu, UnlistedBlocksSkippedAndFullBlocksSkipMaskMod) { check(sparse_pattern_case()); }

// The short-query path (Sq <= 64): keys split over CTAs, then combined. Each case runs split
// (auto or a given count) and unsplit (num_splits = 1), both against the CPU backend; the
// workspace size shows the split was taken.
TEST_F(FlexGpu, ShortQueriesSplitKvMatchesFullPath) {
  std::vector<FlexGpuCase> cases;
  FlexGpuCase c;
  c.Sq = 1;  // decode: one query, 5000 keys, no mods, no BlockMask; auto split count
  c.Sk = 5000;
  c.block_mask = 0;
  cases.push_back(c);
  c = FlexGpuCase{};
  c.Sq = 16;  // ALiBi + a 1000-key window, per-(b, h) BlockMask with full blocks
  c.Sk = 3000;
  c.alibi = true;
  c.window = 1000;
  cases.push_back(c);
  c = FlexGpuCase{};
  c.Sq = 64;  // documents, D64, GQA 4, an explicit 7 parts
  c.Sk = 2000;
  c.Hq = 8;
  c.D = 64;
  c.document = true;
  c.num_splits = 7;
  cases.push_back(c);
  c = FlexGpuCase{};
  c.Sq = 33;  // D256 fp16 softcap, broadcast BlockMask, 3 parts
  c.Sk = 1000;
  c.D = 256;
  c.dt = DType::kFloat16;
  c.softcap = 20;
  c.block_mask = 2;
  c.num_splits = 3;
  cases.push_back(c);
  c = FlexGpuCase{};
  c.Sq = 16;  // causal: each query sees key block 0 only; 8 parts, 7 of them empty
  c.Sk = 1500;
  c.causal = true;
  c.num_splits = 8;
  cases.push_back(c);
  c = FlexGpuCase{};
  c.Sq = 1;  // two key tiles, two parts
  c.Sk = 129;
  c.block_mask = 0;
  c.num_splits = 2;
  cases.push_back(c);
  for (FlexGpuCase x : cases) {
    HostTensor q(DType::kFloat16, {x.B, x.Hq, x.Sq, x.D}), k(DType::kFloat16, {x.B, x.Hkv, x.Sk, x.D});
    FlexFwdParams p;
    p.q = q.view;
    p.k = k.view;
    p.v = k.view;
    p.out = q.view;
    p.q.device = p.k.device = p.v.device = p.out.device = Device::cuda(0);
    p.num_splits = x.num_splits;
    EXPECT_GT(flex_forward_workspace_size(p), 16u) << x.name() << ": the split-KV path was not taken";
    check(x);
    x.num_splits = 1;
    check(x);
  }
}

// GQA packing on the short-query path: a group's queries stacked into one query tile's rows
// (split_plan.hpp). Per-head mods (ALiBi) see each row's own head; per-position ones its own query;
// split and unsplit (the packed out / lse strides in the kernel's epilogue) against the CPU.
TEST_F(FlexGpu, ShortGqaQueriesPackedIntoOneTile) {
  struct Packed {
    FlexGpuCase c;
    int heads_per_tile;  // packed_query_heads() expected for this shape
  };
  std::vector<Packed> cases;
  FlexGpuCase c;
  c.Sq = 1;  // decode, 8 query heads per KV head, ALiBi; auto split count
  c.Sk = 3000;
  c.Hq = 16;
  c.alibi = true;
  c.block_mask = 0;
  cases.push_back({c, 8});
  c = FlexGpuCase{};
  c.Sq = 3;  // rows j * 3 + i, documents + ALiBi + causal, broadcast BlockMask, unsplit, D64
  c.Sk = 700;
  c.Hq = 8;
  c.D = 64;
  c.document = c.alibi = c.causal = true;
  c.block_mask = 2;
  c.num_splits = 1;
  cases.push_back({c, 4});
  c = FlexGpuCase{};
  c.Sq = 16;  // 8 x 16 = 128 rows: one full tile; window without causal, softcap, D256 fp16, 3 parts
  c.Sk = 900;
  c.Hq = 16;
  c.D = 256;
  c.dt = DType::kFloat16;
  c.window = 500;
  c.softcap = 20;
  c.block_mask = 0;
  c.num_splits = 3;
  cases.push_back({c, 8});
  c = FlexGpuCase{};
  c.Sq = 5;  // MQA, prefix-LM, broadcast BlockMask, 2 parts
  c.Sk = 129;
  c.Hkv = 1;
  c.prefix = c.causal = true;
  c.block_mask = 2;
  c.num_splits = 2;
  cases.push_back({c, 4});
  c = FlexGpuCase{};
  c.Sq = 33;  // 4 x 33 = 132 rows: not packed
  c.Sk = 1000;
  c.Hq = 8;
  c.alibi = true;
  c.block_mask = 0;
  cases.push_back({c, 1});
  for (const auto& [x, heads] : cases) {
    HostTensor q(x.dt, {x.B, x.Hq, x.Sq, x.D}), k(x.dt, {x.B, x.Hkv, x.Sk, x.D}), lse(DType::kFloat32, {x.B, x.Hq, x.Sq});
    FlexFwdParams p;
    p.q = p.out = q.view;
    p.k = p.v = k.view;
    p.lse = lse.view;
    EXPECT_EQ(cuda::flex::packed_query_heads(p), heads) << x.name();
    check(x);
  }
}

TEST_F(FlexGpu, SplitKvOnLongQueriesIsRefused) {
  HostTensor q(DType::kBFloat16, {1, 1, 200, 128}), out(DType::kBFloat16, {1, 1, 200, 128});
  DeviceTensor dq(q), dout(out);
  FlexFwdParams p;
  p.q = p.k = p.v = dq.view;
  p.out = dout.view;
  p.num_splits = 4;
  DeviceScratch ws(flex_forward_workspace_size(p));
  p.workspace = ws.workspace();
  const Status st = flex_attention_forward(p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("num_splits: split-KV is the short-query path"), std::string::npos) << st.message();
}

TEST_F(FlexGpu, UnsupportedBlockSizesAreRefused) {
  FlexGpuCase c;
  c.Sq = c.Sk = 256;
  HostTensor q(c.dt, {1, 1, 256, 128}), out(c.dt, {1, 1, 256, 128});
  HostBlockMask bm = build_block_mask(256, 256, 64, 64, 1, 1, [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; });
  DeviceTensor dq(q), dk(q), dv(q), dout(out), bn(bm.kv_num), bi(bm.kv_idx);
  FlexFwdParams p;
  p.q = dq.view;
  p.k = dk.view;
  p.v = dv.view;
  p.out = dout.view;
  p.block_mask = bm.view();
  p.block_mask.kv_num_blocks = bn.view;
  p.block_mask.kv_indices = bi.view;
  p.block_mask.full_kv_num_blocks = {};
  p.block_mask.full_kv_indices = {};
  DeviceScratch ws(flex_forward_workspace_size(p));
  p.workspace = ws.workspace();
  const Status st = flex_attention_forward(p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("block_mask.block_q"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace attnkit::test
