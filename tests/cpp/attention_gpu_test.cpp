// tests/cpp/attention_gpu_test.cpp — the Hopper attention forward against the CPU backend.
//
// Reference: the CPU backend in float64 on the same (rounded) inputs. Error rule: the GPU error
// may be at most twice the error of the CPU backend's own bf16/fp16 run (fp32 math, output rounded
// to 16 bits) plus a small absolute term. Outputs are poisoned with NaN before each launch.
#include <algorithm>
#include <limits>

#include "attention_case.hpp"
#include "gpu_util.hpp"

namespace attnkit::test {
namespace {

struct Run {
  HostTensor out, lse;
};

// Runs attention_forward on `device` (cpu or cuda) with inputs converted to `dt`.
Run run(const Case& c, const HostTensor& q, const HostTensor& k, const HostTensor& v, DType dt, bool on_gpu,
        const HostTensor* cuq, const HostTensor* cuk) {
  const bool varlen = cuq != nullptr;
  std::vector<int> perm;
  if (c.strided && !varlen) perm = {0, 2, 1, 3};
  HostTensor qh = q.to(dt, perm), kh = k.to(dt, perm), vh = v.to(dt, perm);
  std::vector<int64_t> oshape(q.view.sizes, q.view.sizes + q.view.ndim);
  Run r{HostTensor(dt, oshape), varlen ? HostTensor(DType::kFloat32, {c.Hq, q.view.sizes[0]})
                                        : HostTensor(DType::kFloat32, {c.B, c.Hq, c.Sq})};
  AttentionFwdParams p;
  p.mask = c.mask;
  p.softcap = c.softcap;
  p.scale = c.scale;
  if (varlen) {
    p.max_seqlen_q = *std::max_element(c.lq.begin(), c.lq.end());
    p.max_seqlen_k = *std::max_element(c.lk.begin(), c.lk.end());
  }
  if (!on_gpu) {
    p.q = qh.view;
    p.k = kh.view;
    p.v = vh.view;
    p.out = r.out.view;
    p.lse = r.lse.view;
    if (varlen) {
      p.cu_seqlens_q = cuq->view;
      p.cu_seqlens_k = cuk->view;
    }
    EXPECT_TRUE(attention_forward(p).ok());
    return r;
  }
  HostTensor ws_host(DType::kInt32, {4});
  DeviceTensor dq(qh), dk(kh), dv(vh), dout(r.out), dlse(r.lse), ws(ws_host);
  dout.poison();
  dlse.poison();
  std::unique_ptr<DeviceTensor> dcq, dck;
  p.q = dq.view;
  p.k = dk.view;
  p.v = dv.view;
  p.out = dout.view;
  p.lse = dlse.view;
  p.workspace = {ws.ptr, ws.bytes};
  if (c.odd_unit_strides)
    for (TensorView* t : {&p.q, &p.k, &p.v, &p.out, &p.lse}) set_odd_unit_strides(*t);
  if (c.broadcast_kv) p.k.strides[0] = p.v.strides[0] = 0;
  if (varlen) {
    dcq = std::make_unique<DeviceTensor>(*cuq);
    dck = std::make_unique<DeviceTensor>(*cuk);
    p.cu_seqlens_q = dcq->view;
    p.cu_seqlens_k = dck->view;
  }
  const Status st = attention_forward(p);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dout.copy_to(r.out);
  dlse.copy_to(r.lse);
  return r;
}

void check(const Case& c) {
  SCOPED_TRACE(c.name());
  std::mt19937 rng(7);
  const bool varlen = !c.lq.empty();
  HostTensor cuq, cuk;
  int64_t tq = c.Sq, tk = c.Sk;
  if (varlen) {
    std::vector<int64_t> a = {0}, b = {0};
    for (size_t i = 0; i < c.lq.size(); ++i) {
      a.push_back(a.back() + c.lq[i]);
      b.push_back(b.back() + c.lk[i]);
    }
    cuq = index_tensor(DType::kInt32, a);
    cuk = index_tensor(DType::kInt32, b);
    tq = a.back();
    tk = b.back();
  }
  HostTensor q(DType::kFloat64, varlen ? std::vector<int64_t>{tq, c.Hq, c.D} : std::vector<int64_t>{c.B, c.Sq, c.Hq, c.D});
  HostTensor k(DType::kFloat64, varlen ? std::vector<int64_t>{tk, c.Hkv, c.D} : std::vector<int64_t>{c.B, c.Sk, c.Hkv, c.D});
  HostTensor v(DType::kFloat64, varlen ? std::vector<int64_t>{tk, c.Hkv, c.D} : std::vector<int64_t>{c.B, c.Sk, c.Hkv, c.D});
  q.randn(rng);
  k.randn(rng);
  v.randn(rng);
  // Key magnitudes cycling every 64 keys: a row's max jumps up and down from key tile to key tile.
  if (c.key_growth > 0)
    for (int64_t i = 0; i < k.numel(); ++i) {
      const int64_t key = i / (c.Hkv * c.D) % c.Sk;
      k.set(i, k.get(i) * (1 + c.key_growth * static_cast<double>(key / 64 % 4)));
    }
  if (c.broadcast_kv) {
    copy_batch0_everywhere(k);
    copy_batch0_everywhere(v);
  }
  q = q.to(c.dt).to(DType::kFloat64);  // every run sees the same 16-bit values
  k = k.to(c.dt).to(DType::kFloat64);
  v = v.to(c.dt).to(DType::kFloat64);
  const HostTensor* pcq = varlen ? &cuq : nullptr;
  const HostTensor* pck = varlen ? &cuk : nullptr;
  Run ref = run(c, q, k, v, DType::kFloat64, false, pcq, pck);
  Run cpu16 = run(c, q, k, v, c.dt, false, pcq, pck);
  Run gpu = run(c, q, k, v, c.dt, true, pcq, pck);
  expect_forward_within_cpu16_error(ref.out.values(), cpu16.out.values(), gpu.out.values(), ref.lse.values(),
                                    gpu.lse.values());
}

class AttentionGpu : public GpuTest {};

TEST_F(AttentionGpu, HeadDimsAndAwkwardLengths) {
  for (const Case& c : head_dim_and_length_cases()) check(c);
}

TEST_F(AttentionGpu, CausalBothAlignmentsWindowsSoftcap) {
  for (const Case& c : mask_cases()) check(c);
}

TEST_F(AttentionGpu, NegativeAndZeroScales) {
  for (const Case& c : nonpositive_scale_cases()) check(c);
}

// No keys, no queries, no batch: the right outputs, and no TMA descriptor of an empty dim.
TEST_F(AttentionGpu, EmptyDims) {
  expect_no_tma_refusals([] {
    for (const Case& c : empty_dim_cases()) check(c);
  });
}

TEST_F(AttentionGpu, OddUnitStridesAndBroadcastKv) {
  for (const Case& c : unusual_stride_cases()) check(c);
}

TEST_F(AttentionGpu, GqaRatiosFp16AndStrides) {
  for (int64_t ratio : {1, 4, 8}) {
    Case c;
    c.Hkv = 2;
    c.Hq = 2 * ratio;
    c.Sq = c.Sk = 333;
    c.mask.causal = true;
    check(c);
  }
  Case f;
  f.dt = DType::kFloat16;
  f.Sq = f.Sk = 257;
  check(f);
  Case s;
  s.strided = true;
  s.B = 2;
  s.Sq = 200;
  s.Sk = 300;
  check(s);
}

// Scores whose row max jumps up and down between key tiles, by far more than 2^8 in exp2's units:
// the output and the row sum rescaled at every rise, untouched at every fall; every head dim.
TEST_F(AttentionGpu, RowMaxJumpsBetweenKeyTiles) {
  for (int64_t D : {64, 128, 256})
    for (bool causal : {false, true}) {
      Case c;
      c.D = D;
      c.Sq = 300;
      c.Sk = 1100;
      c.mask.causal = causal;
      c.key_growth = 2.0;
      check(c);
    }
}

TEST_F(AttentionGpu, VarlenWithOneTokenAndEmptySequences) {
  for (int64_t D : {64, 128}) {
    Case c;
    c.D = D;
    c.lq = {1, 0, 17, 300, 128, 5};
    c.lk = {1, 7, 0, 301, 200, 5};
    c.B = static_cast<int64_t>(c.lq.size());
    c.Hq = 4;
    c.Hkv = 2;
    check(c);
    c.mask.causal = true;
    check(c);
  }
}

}  // namespace
}  // namespace attnkit::test
