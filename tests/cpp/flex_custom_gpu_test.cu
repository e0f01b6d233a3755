// tests/cpp/flex_custom_gpu_test.cu — your own flex functors on the GPU
// (attnkit/cuda/flex_cuda.cuh), against the CPU backend running the same functors
// (cpu::flex_forward_with_mods) with the forward error rule of the other GPU tests. Two
// instantiations live in this file: bf16 D128 with the examples' bias + causal-with-sinks mods,
// fp16 D64 with a per-head table bias and NoMaskMod (BlockMask blocks all treated as full); and
// one backward instantiation (cuda::flex_backward_with_mods): bf16 D128, a score mod whose
// derivative is not 1, causal-with-sinks, against cpu::flex_backward_with_mods.
#include <array>
#include <memory>

#include "attnkit/cpu/flex_cpu.hpp"
#include "attnkit/cuda/flex_cuda.cuh"
#include "examples/custom_mods.hpp"
#include "flex_block_mask.hpp"
#include "gpu_util.hpp"

namespace attnkit::test {
namespace {

// score + table[h]: a functor that reads memory (host or device, as the run needs).
struct HeadBias {
  const float* table;
  template <class T>
  ATTNKIT_HD T operator()(T s, int64_t, int64_t h, int64_t, int64_t, T* ds) const {
    *ds = T(1);
    return s + static_cast<T>(table[h]);
  }
};

// 0.5 * score + a per-key bias: its derivative, 0.5, must reach dq and dk.
struct HalfScoreKeyBias {
  template <class T>
  ATTNKIT_HD T operator()(T s, int64_t, int64_t, int64_t, int64_t kv, T* ds) const {
    *ds = T(0.5);
    return T(0.5) * s + T(0.01) * static_cast<T>(kv % 7);
  }
};

struct Dims {
  int64_t B, Hq, Hkv, Sq, Sk, D;
};

struct Result {
  HostTensor out, lse;
};

// One forward with the CPU backend (dt: float64 reference or the 16-bit run) on host tensors.
template <class ScoreMod, class MaskMod>
Result run_cpu(const Dims& s, const HostTensor& q, const HostTensor& k, const HostTensor& v, DType dt, const ScoreMod& sm,
            const MaskMod& mm, const HostBlockMask* bm) {
  HostTensor qh = q.to(dt), kh = k.to(dt), vh = v.to(dt);
  Result r{HostTensor(dt, {s.B, s.Hq, s.Sq, s.D}), HostTensor(DType::kFloat32, {s.B, s.Hq, s.Sq})};
  FlexFwdParams p;
  p.q = qh.view;
  p.k = kh.view;
  p.v = vh.view;
  p.out = r.out.view;
  p.lse = r.lse.view;
  if (bm) p.block_mask = bm->view();
  const Status st = cpu::flex_forward_with_mods(p, sm, mm);
  EXPECT_TRUE(st.ok()) << st.message();
  return r;
}

template <DType kDt, int kD, class ScoreMod, class MaskMod>
Result run_gpu(const Dims& s, const HostTensor& q, const HostTensor& k, const HostTensor& v, const ScoreMod& sm,
            const MaskMod& mm, const HostBlockMask* bm) {
  HostTensor qh = q.to(kDt), kh = k.to(kDt), vh = v.to(kDt);
  Result r{HostTensor(kDt, {s.B, s.Hq, s.Sq, s.D}), HostTensor(DType::kFloat32, {s.B, s.Hq, s.Sq})};
  DeviceTensor dq(qh), dk(kh), dv(vh), dout(r.out), dlse(r.lse);
  dout.poison();
  dlse.poison();
  FlexFwdParams p;
  p.q = dq.view;
  p.k = dk.view;
  p.v = dv.view;
  p.out = dout.view;
  p.lse = dlse.view;
  std::unique_ptr<DeviceTensor> bn, bi, fn, fi;
  if (bm) {
    bn = std::make_unique<DeviceTensor>(bm->kv_num);
    bi = std::make_unique<DeviceTensor>(bm->kv_idx);
    fn = std::make_unique<DeviceTensor>(bm->full_num);
    fi = std::make_unique<DeviceTensor>(bm->full_idx);
    p.block_mask = bm->view();
    p.block_mask.kv_num_blocks = bn->view;
    p.block_mask.kv_indices = bi->view;
    p.block_mask.full_kv_num_blocks = fn->view;
    p.block_mask.full_kv_indices = fi->view;
  }
  DeviceScratch ws(flex_forward_workspace_size(p));
  p.workspace = ws.workspace();
  const Status st = attnkit::cuda::flex_forward_with_mods<kDt, kD>(p, sm, mm);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(r.out);
  dlse.copy_to(r.lse);
  return r;
}

std::array<HostTensor, 3> random_inputs(const Dims& s, DType dt) {
  std::mt19937 rng(5);
  std::array<HostTensor, 3> t{HostTensor(DType::kFloat64, {s.B, s.Hq, s.Sq, s.D}), HostTensor(DType::kFloat64, {s.B, s.Hkv, s.Sk, s.D}),
                              HostTensor(DType::kFloat64, {s.B, s.Hkv, s.Sk, s.D})};
  for (HostTensor& x : t) {
    x.randn(rng);
    x = x.to(dt).to(DType::kFloat64);  // every run sees the same 16-bit values
  }
  return t;
}

class FlexCustomGpu : public GpuTest {};

TEST_F(FlexCustomGpu, ExampleModsWithAndWithoutBlockMask) {
  const Dims s{2, 4, 2, 333, 400, 128};  // GQA 2, lengths off the tile grid
  auto [q, k, v] = random_inputs(s, DType::kBFloat16);
  const CappedDistanceBias sm{-0.05f};
  const CausalWithSinks mm{};
  const HostBlockMask bm = build_block_mask(s.Sq, s.Sk, 128, 128, s.B, s.Hq, [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return mm(b, h, i, j);
  });
  for (const HostBlockMask* m : {static_cast<const HostBlockMask*>(nullptr), &bm}) {
    SCOPED_TRACE(m ? "with BlockMask" : "without BlockMask");
    Result ref = run_cpu(s, q, k, v, DType::kFloat64, sm, mm, m);
    Result cpu16 = run_cpu(s, q, k, v, DType::kBFloat16, sm, mm, m);
    Result gpu = run_gpu<DType::kBFloat16, 128>(s, q, k, v, sm, mm, m);
    expect_forward_within_cpu16_error(ref.out.values(), cpu16.out.values(), gpu.out.values(), ref.lse.values(),
                                      gpu.lse.values());
  }
}

TEST_F(FlexCustomGpu, TableScoreModAndNoMaskModWithBlockPattern) {
  const Dims s{1, 8, 8, 500, 700, 64};
  auto [q, k, v] = random_inputs(s, DType::kFloat16);
  HostTensor bias(DType::kFloat32, {s.Hq});
  for (int64_t h = 0; h < s.Hq; ++h) bias.set(h, 0.25 * static_cast<double>(h) - 1.0);
  DeviceTensor dbias(bias);
  // A band of blocks, listed as partial: with NoMaskMod every listed block is fully visible and
  // the rest skipped — on both backends. The first query block sees nothing (LSE -inf, out 0).
  const HostBlockMask bm = build_block_mask(s.Sq, s.Sk, 128, 128, 1, 1, [](int64_t, int64_t, int64_t i, int64_t j) {
    return i >= 128 && std::abs(i / 128 - j / 128) <= 1;
  }, /*use_full=*/false);
  const HeadBias host_mod{static_cast<const float*>(bias.view.data)}, device_mod{static_cast<const float*>(dbias.view.data)};
  Result ref = run_cpu(s, q, k, v, DType::kFloat64, host_mod, NoMaskMod{}, &bm);
  Result cpu16 = run_cpu(s, q, k, v, DType::kFloat16, host_mod, NoMaskMod{}, &bm);
  Result gpu = run_gpu<DType::kFloat16, 64>(s, q, k, v, device_mod, NoMaskMod{}, &bm);
  expect_forward_within_cpu16_error(ref.out.values(), cpu16.out.values(), gpu.out.values(), ref.lse.values(),
                                    gpu.lse.values());
}

struct Grads {
  HostTensor dq, dk, dv;
};

// The CPU forward then backward in dtype dt with the given functors; out / lse keep the forward's.
template <class ScoreMod, class MaskMod>
Grads backward_cpu(const Dims& s, const std::array<HostTensor, 4>& in, DType dt, const ScoreMod& sm, const MaskMod& mm,
                   const HostBlockMask& bm, Result* fwd) {
  *fwd = run_cpu(s, in[0], in[1], in[2], dt, sm, mm, &bm);
  HostTensor q = in[0].to(dt), k = in[1].to(dt), v = in[2].to(dt), dout = in[3].to(dt);
  Grads g{HostTensor(dt, {s.B, s.Hq, s.Sq, s.D}), HostTensor(dt, {s.B, s.Hkv, s.Sk, s.D}), HostTensor(dt, {s.B, s.Hkv, s.Sk, s.D})};
  FlexBwdParams p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = fwd->out.view;
  p.lse = fwd->lse.view;
  p.dout = dout.view;
  p.dq = g.dq.view;
  p.dk = g.dk.view;
  p.dv = g.dv.view;
  p.block_mask = bm.view();
  const Status st = cpu::flex_backward_with_mods(p, sm, mm);
  EXPECT_TRUE(st.ok()) << st.message();
  return g;
}

TEST_F(FlexCustomGpu, BackwardThroughAScoreModDerivative) {
  const Dims s{2, 4, 2, 333, 400, 128};
  auto [q, k, v] = random_inputs(s, DType::kBFloat16);
  HostTensor dout(DType::kFloat64, {s.B, s.Hq, s.Sq, s.D});
  std::mt19937 rng(9);
  dout.randn(rng);
  dout = dout.to(DType::kBFloat16).to(DType::kFloat64);
  const std::array<HostTensor, 4> in{q, k, v, dout};
  const HalfScoreKeyBias sm{};
  const CausalWithSinks mm{};
  const HostBlockMask bm = build_block_mask(s.Sq, s.Sk, 128, 128, s.B, s.Hq, [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return mm(b, h, i, j);
  });
  Result fwd64, fwd16;
  const Grads ref = backward_cpu(s, in, DType::kFloat64, sm, mm, bm, &fwd64);
  const Grads cpu16 = backward_cpu(s, in, DType::kBFloat16, sm, mm, bm, &fwd16);
  // The GPU backward on the CPU's 16-bit forward.
  HostTensor qh = q.to(DType::kBFloat16), kh = k.to(DType::kBFloat16), vh = v.to(DType::kBFloat16), doh = dout.to(DType::kBFloat16);
  Grads gpu{HostTensor(DType::kBFloat16, {s.B, s.Hq, s.Sq, s.D}), HostTensor(DType::kBFloat16, {s.B, s.Hkv, s.Sk, s.D}),
            HostTensor(DType::kBFloat16, {s.B, s.Hkv, s.Sk, s.D})};
  DeviceTensor dq(qh), dk(kh), dv(vh), ddo(doh), dout16(fwd16.out), dlse(fwd16.lse), gq(gpu.dq), gk(gpu.dk), gv(gpu.dv);
  DeviceTensor bn(bm.kv_num), bi(bm.kv_idx), fn(bm.full_num), fi(bm.full_idx);
  for (DeviceTensor* t : {&gq, &gk, &gv}) t->poison();
  FlexBwdParams p;
  p.q = dq.view;
  p.k = dk.view;
  p.v = dv.view;
  p.out = dout16.view;
  p.lse = dlse.view;
  p.dout = ddo.view;
  p.dq = gq.view;
  p.dk = gk.view;
  p.dv = gv.view;
  p.block_mask = bm.view();
  p.block_mask.kv_num_blocks = bn.view;
  p.block_mask.kv_indices = bi.view;
  p.block_mask.full_kv_num_blocks = fn.view;
  p.block_mask.full_kv_indices = fi.view;
  DeviceScratch ws(flex_backward_workspace_size(p));
  p.workspace = ws.workspace();
  const Status st = attnkit::cuda::flex_backward_with_mods<DType::kBFloat16, 128>(p, sm, mm);
  ASSERT_TRUE(st.ok()) << st.message();
  gq.copy_to(gpu.dq);
  gk.copy_to(gpu.dk);
  gv.copy_to(gpu.dv);
  expect_grads_within_cpu16_error({&ref.dq, &ref.dk, &ref.dv}, {&cpu16.dq, &cpu16.dk, &cpu16.dv}, {&gpu.dq, &gpu.dk, &gpu.dv});
}

TEST_F(FlexCustomGpu, WrongInstantiationIsRefusedNamingQ) {
  const Dims s{1, 2, 2, 64, 64, 128};
  auto [q, k, v] = random_inputs(s, DType::kBFloat16);
  HostTensor qh = q.to(DType::kBFloat16), kh = k.to(DType::kBFloat16), vh = v.to(DType::kBFloat16),
             out(DType::kBFloat16, {s.B, s.Hq, s.Sq, s.D});
  DeviceTensor dq(qh), dk(kh), dv(vh), dout(out);
  DeviceScratch ws(16);
  FlexFwdParams p;
  p.q = dq.view;
  p.k = dk.view;
  p.v = dv.view;
  p.out = dout.view;
  p.workspace = ws.workspace();
  const HeadBias mod{nullptr};
  const Status st = attnkit::cuda::flex_forward_with_mods<DType::kFloat16, 64>(p, mod, NoMaskMod{});  // bf16 D128 data
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("q: this instantiation takes float16, got bfloat16"), std::string::npos) << st.message();
  p.q = qh.view;  // CPU tensors
  p.k = kh.view;
  p.v = vh.view;
  p.out = out.view;
  p.workspace = {};
  const Status st_cpu = attnkit::cuda::flex_forward_with_mods<DType::kFloat16, 64>(p, mod, NoMaskMod{});
  EXPECT_FALSE(st_cpu.ok());
  EXPECT_NE(st_cpu.message().find("q: cuda::flex_forward_with_mods runs on the GPU"), std::string::npos) << st_cpu.message();
}

}  // namespace
}  // namespace attnkit::test
