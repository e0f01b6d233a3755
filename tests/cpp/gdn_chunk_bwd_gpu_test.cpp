// tests/cpp/gdn_chunk_bwd_gpu_test.cpp — the CUDA chunked backward (every gradient: dq, dk, dv,
// dbeta, dg, dh0, dA_log, ddt_bias) against the CPU backend's float64 run on exactly the same
// 16-bit inputs (the CPU backward is itself checked by finite differences in gdn_backward_test.cpp),
// with FLA's metric RMS(err) / RMS(ref) and tolerances (spec/gdn.md): 0.008 on dq, dk, dv, dh0;
// 0.02 on dbeta, dg (and the fused gate's sums). Gradients NaN-poisoned before every launch;
// bitwise determinism over 10 runs; the backward rerunning the forward's kernels and the backward
// reading the forward's kept intermediates.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "attnkit/semantics/numerics.hpp"
#include "gdn_test_util.hpp"
#include "gpu_util.hpp"

namespace attnkit::test {
namespace {

// Device copies of host tensors, the views swapped for device ones in a copy of their holder.
struct Mirrors {
  std::vector<std::unique_ptr<DeviceTensor>> bufs;
  DeviceTensor* mirror(const HostTensor& h, HostTensor& target) {
    if (!h.view.defined()) return nullptr;
    bufs.push_back(std::make_unique<DeviceTensor>(h));
    target.view = bufs.back()->view;
    return bufs.back().get();
  }
};

// One GPU backward of case c: inputs, cotangents and (NaN) gradients on the device.
struct DeviceBackward {
  Mirrors m;
  GdnData dev;
  Cotangents ct_dev;
  GdnGrads host, dev_grads;
  std::vector<std::pair<HostTensor*, DeviceTensor*>> grads;  // host copy, device tensor
  GdnBwdParams p;
  std::unique_ptr<DeviceScratch> ws, kept, fwd_ws;
  std::unique_ptr<DeviceTensor> out;
  // grad_pad > 0: the dq, dk, dv outputs' rows padded too (not 16-byte aligned: the gradient
  // kernel's 4-byte stores instead of its 16-byte pieces).
  DeviceBackward(const GdnCase& c, const GdnData& d, const Cotangents& ct, int64_t grad_pad = 0)
      : dev(d), ct_dev(ct), host(padded_grads(make_grads(d), grad_pad)), dev_grads(host) {
    for (auto [s, t] : {std::pair{&d.q, &dev.q}, std::pair{&d.k, &dev.k}, std::pair{&d.v, &dev.v}, std::pair{&d.beta, &dev.beta},
                        std::pair{&d.g, &dev.g}, std::pair{&d.gk, &dev.gk}, std::pair{&d.A_log, &dev.A_log},
                        std::pair{&d.dt_bias, &dev.dt_bias}, std::pair{&d.h0, &dev.h0}, std::pair{&d.cu, &dev.cu}})
      m.mirror(*s, *t);
    m.mirror(ct.W, ct_dev.W);
    m.mirror(ct.W2, ct_dev.W2);
    for (auto [s, t] : grad_pairs(host, dev_grads))
      if (DeviceTensor* x = m.mirror(*s, *t)) grads.push_back({s, x});
    p = gdn_bwd_params(c, dev, ct_dev, dev_grads);
    ws = std::make_unique<DeviceScratch>(gdn_backward_workspace_size(p));
    p.workspace = ws->workspace();
  }
  static GdnGrads padded_grads(GdnGrads g, int64_t pad) {
    if (pad) {
      g.dq = padded_rows(g.dq, pad);
      g.dk = padded_rows(g.dk, pad);
      g.dv = padded_rows(g.dv, pad);
    }
    return g;
  }
  static std::vector<std::pair<HostTensor*, HostTensor*>> grad_pairs(GdnGrads& a, GdnGrads& b) {
    return {{&a.dq, &b.dq}, {&a.dk, &b.dk}, {&a.dv, &b.dv}, {&a.dbeta, &b.dbeta}, {&a.dg, &b.dg},
            {&a.dh0, &b.dh0}, {&a.dA_log, &b.dA_log}, {&a.ddt_bias, &b.ddt_bias}};
  }
  // Runs the forward keeping its intermediates (all, or T alone; in a buffer poisoned with 0xff
  // bytes) and has the backward read them instead of rerunning the forward's kernels.
  Status keep_from_forward(const GdnData& d, GdnKeep keep = GdnKeep::kAll) {
    GdnFwdParams f;
    f.in = p.in;
    f.keep = p.keep = keep;
    out = std::make_unique<DeviceTensor>(HostTensor(d.v.view.dtype, std::vector<int64_t>(d.v.view.sizes, d.v.view.sizes + 4)));
    f.out = out->view;
    f.num_segments = p.num_segments;  // the rerun's plan: the same pieces either way
    kept = std::make_unique<DeviceScratch>(gdn_intermediates_size(f.in, keep));
    if (kept->bytes == 0) return Status::Ok();  // nothing kept for these inputs (gk): the backward reruns
    f.intermediates = kept->workspace();
    fwd_ws = std::make_unique<DeviceScratch>(gdn_forward_workspace_size(f));
    f.workspace = fwd_ws->workspace();
    ATTNKIT_RETURN_IF_ERROR(gdn_forward(f));
    p.intermediates = f.intermediates;
    ws = std::make_unique<DeviceScratch>(gdn_backward_workspace_size(p));
    p.workspace = ws->workspace();
    return Status::Ok();
  }
  // Runs the backward (gradients poisoned first) and copies the gradients back into `host`.
  Status run() {
    for (auto [h, x] : grads) x->poison();
    const Status st = gdn_backward(p);
    if (!st.ok()) return st;
    for (auto [h, x] : grads) x->copy_to(*h);
    return st;
  }
};

// row_pad > 0: q, k, v rows padded (not 16-byte aligned: every kernel's element-copy path), and
// for an even pad the dq, dk, dv outputs' rows alike (4-byte aligned, the least the CUDA backward
// takes for them: its 4-byte pair stores instead of the 16-byte pieces).
// kept: the backward reads the forward's intermediates (those `keep` names). segments: GdnFwdParams /
// GdnBwdParams::num_segments, the forward's sequence split (0 automatic). Returns the GPU gradients.
GdnGrads check_backward(const GdnCase& c, uint32_t seed = 41, int64_t row_pad = 0, bool kept = false, int segments = 0,
                        GdnKeep keep = GdnKeep::kAll) {
  GdnData d = make_gdn(c, seed);
  if (row_pad) {
    d.q = padded_rows(d.q, row_pad);
    d.k = padded_rows(d.k, row_pad);
    d.v = padded_rows(d.v, row_pad);
  }
  const Cotangents ct = make_cotangents(c, seed + 1);
  GdnCase c64;
  const GdnData d64 = float64_twin(c, d, c64);
  const Cotangents ct64{ct.W.to(DType::kFloat64), ct.W2.to(DType::kFloat64)};
  const GdnGrads ref = run_backward(c64, d64, ct64);

  DeviceBackward gpu(c, d, ct, row_pad % 2 == 0 ? row_pad : 0);
  if (segments) {
    gpu.p.num_segments = segments;
    gpu.ws = std::make_unique<DeviceScratch>(gdn_backward_workspace_size(gpu.p));
    gpu.p.workspace = gpu.ws->workspace();
  }
  if (kept) {
    const Status st = gpu.keep_from_forward(gpu.dev, keep);
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) return {};
  }
  const Status st = gpu.run();
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return {};
  const GdnGrads& g = gpu.host;
  auto expect_close = [](const char* name, const HostTensor& x, const HostTensor& r, double tol) {
    if (!r.view.defined()) return;
    const auto v = x.values();
    ASSERT_TRUE(all_finite(v)) << name << ": unwritten or non-finite elements";
    EXPECT_LT(rel_rms(v, r.values()), tol) << name;
  };
  expect_close("dq", g.dq, ref.dq, 0.008);
  expect_close("dk", g.dk, ref.dk, 0.008);
  expect_close("dv", g.dv, ref.dv, 0.008);
  expect_close("dh0", g.dh0, ref.dh0, 0.008);
  expect_close("dbeta", g.dbeta, ref.dbeta, 0.02);
  expect_close("dg", g.dg, ref.dg, 0.02);
  expect_close("dA_log", g.dA_log, ref.dA_log, 0.02);
  expect_close("ddt_bias", g.ddt_bias, ref.ddt_bias, 0.02);
  return g;
}

void expect_same_bits(const GdnGrads& a, const GdnGrads& b) {
  EXPECT_EQ(a.dq.buf, b.dq.buf);
  EXPECT_EQ(a.dk.buf, b.dk.buf);
  EXPECT_EQ(a.dv.buf, b.dv.buf);
  EXPECT_EQ(a.dbeta.buf, b.dbeta.buf);
  EXPECT_EQ(a.dg.buf, b.dg.buf);
  EXPECT_EQ(a.dh0.buf, b.dh0.buf);
  EXPECT_EQ(a.dA_log.buf, b.dA_log.buf);
  EXPECT_EQ(a.ddt_bias.buf, b.ddt_bias.buf);
}

GdnCase bwd_case(DType dt, int64_t D, int64_t T) {
  GdnCase c = head_case(dt, D, T);
  c.g_lo = -0.1;
  return c;
}

class GdnChunkBwdGpu : public GpuTest {};

TEST_F(GdnChunkBwdGpu, HeadDimsDtypesAndTails) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t D : {64, 128})
      for (int64_t T : {1, 63, 200}) {
        SCOPED_TRACE("dtype=" + std::to_string(int(dt)) + " D=" + std::to_string(D) + " T=" + std::to_string(T));
        GdnCase c = bwd_case(dt, D, T);
        if (T == 200) c.H = c.HV;  // no GVA: dq, dk final in the per-chunk kernel
        check_backward(c);
      }
}

TEST_F(GdnChunkBwdGpu, GateStrengthsAndNoGate) {
  for (auto [lo, hi] : {std::pair{-3.0, -0.5}, std::pair{-0.02, 0.0}, std::pair{0.0, 0.0}}) {
    SCOPED_TRACE("g in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    GdnCase c = bwd_case(DType::kBFloat16, 128, 300);
    c.g_lo = lo;
    c.g_hi = hi;
    check_backward(c);
  }
  GdnCase c = bwd_case(DType::kBFloat16, 64, 150);
  c.scalar_gate = false;
  check_backward(c);
}

TEST_F(GdnChunkBwdGpu, InOpOptionsAndVFirstLayout) {
  GdnCase c = bwd_case(DType::kBFloat16, 128, 150);
  c.l2norm = c.beta_logit = c.fused_gate = true;
  check_backward(c);  // GVA: the l2norm backward in the finish pass
  c.H = c.HV;
  check_backward(c);  // no GVA: in the per-chunk kernel
  c.layout = StateLayout::kVK;
  c.h0 = false;
  check_backward(c);
}

// beta in another dtype than q's (fp32, as callers of FLA often pass it; fp64): the gradient
// kernel holds beta's raw bits an item ahead and converts them where it uses them.
TEST_F(GdnChunkBwdGpu, BetaInOtherDtypes) {
  for (DType beta_dt : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE("beta dtype=" + std::to_string(int(beta_dt)));
    GdnCase c = bwd_case(DType::kBFloat16, 128, 200);
    c.H = c.HV;
    c.beta_dt = beta_dt;
    c.beta_logit = beta_dt == DType::kFloat32;
    check_backward(c);
  }
}

TEST_F(GdnChunkBwdGpu, VarlenWithShortAndEmptySequencesAndGva) {
  for (auto [H, HV] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{1, 4}}) {
    SCOPED_TRACE("H=" + std::to_string(H) + " HV=" + std::to_string(HV));
    GdnCase c = bwd_case(DType::kBFloat16, 64, 0);
    c.B = 1;
    c.seqlens = {1, 0, 130, 64, 65, 7};
    c.T = 267;
    c.H = H;
    c.HV = HV;
    c.l2norm = true;
    check_backward(c);
  }
}

// The gradient kernel is persistent (one CTA per SM) and loads each item's first operands while
// the previous item computes: only with several items per CTA does that path run. 396 and 464
// (chunk, value head) items: at least 3 per CTA on a 132-SM H100 / H200; the varlen batch puts
// slots past its sequences' ends (skipped) between live ones.
TEST_F(GdnChunkBwdGpu, SeveralItemsPerCta) {
  GdnCase c = bwd_case(DType::kBFloat16, 128, 4200);  // 66 chunks, the last 40 rows
  c.B = 1;
  c.H = c.HV = 6;
  check_backward(c);
  c = bwd_case(DType::kBFloat16, 64, 0);
  c.B = 1;
  c.seqlens = {1000, 1, 777, 0, 1500, 63};
  c.T = 3341;
  c.H = 2;
  c.HV = 8;
  c.l2norm = true;
  check_backward(c);
  // 1024 items: ~4 an SM's two persistent dv_local CTAs, so each CTA's two stage barriers pass
  // through both phases (~8 items a gradient-kernel CTA).
  c = bwd_case(DType::kBFloat16, 64, 4096);
  c.B = 1;
  c.H = c.HV = 16;
  c.l2norm = true;
  check_backward(c);
}

TEST_F(GdnChunkBwdGpu, UnalignedRows) {
  GdnCase c = bwd_case(DType::kFloat16, 64, 100);
  c.l2norm = true;
  check_backward(c, 43, 4);  // rows 8-byte aligned (the outputs' too)
  c = bwd_case(DType::kBFloat16, 128, 70);
  c.l2norm = true;
  c.H = c.HV;
  check_backward(c, 44, 1);  // rows 2-byte aligned: every element path, the l2norm's included
}

// No tokens at all: dh0 is dht, the fused gate's sums are 0, nothing else to write.
TEST_F(GdnChunkBwdGpu, NoTokens) {
  GdnCase c = bwd_case(DType::kBFloat16, 64, 0);
  c.B = 1;
  c.seqlens = {0, 0};
  c.fused_gate = true;
  const GdnData d = make_gdn(c, 7);
  const Cotangents ct = make_cotangents(c, 8);
  DeviceBackward gpu(c, d, ct);
  const Status st = gpu.run();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(gpu.host.dh0.values(), ct.W2.values());
  for (double x : gpu.host.dA_log.values()) EXPECT_EQ(x, 0.0);
  for (double x : gpu.host.ddt_bias.values()) EXPECT_EQ(x, 0.0);
}

// The kept-intermediates tests' cases: no GVA, GVA with the fused gate and logit beta, varlen with
// empty and 1-token sequences, the in-op l2norm (with and without GVA, and varlen).
std::vector<GdnCase> kept_cases() {
  GdnCase plain = bwd_case(DType::kBFloat16, 128, 200);
  plain.H = plain.HV;
  GdnCase gva = bwd_case(DType::kFloat16, 64, 130);
  gva.fused_gate = gva.beta_logit = true;
  GdnCase varlen = bwd_case(DType::kBFloat16, 128, 0);
  varlen.B = 1;
  varlen.seqlens = {1, 0, 130, 64, 65, 7};
  varlen.T = 267;
  varlen.H = 2;
  varlen.HV = 4;
  GdnCase l2 = bwd_case(DType::kBFloat16, 64, 150);
  l2.l2norm = true;
  GdnCase l2_direct = bwd_case(DType::kFloat16, 128, 200);
  l2_direct.l2norm = l2_direct.fused_gate = true;
  l2_direct.H = l2_direct.HV;  // dq, dk final in the per-chunk kernel, with dv_local's inverse norms
  GdnCase l2_varlen = varlen;
  l2_varlen.l2norm = true;
  return {plain, gva, varlen, l2, l2_direct, l2_varlen};
}

// The forward's kept intermediates in place of the rerun: the same tolerances and the same bits —
// the forward's kernels compute the same pieces from the same inputs either way (with the in-op
// l2norm too: the rerun normalises q, k on load as the forward does).
TEST_F(GdnChunkBwdGpu, KeptIntermediates) {
  int i = 0;
  for (const GdnCase& c : kept_cases()) {
    SCOPED_TRACE("case " + std::to_string(i++));
    const GdnGrads kept = check_backward(c, 41, 0, true);
    expect_same_bits(kept, check_backward(c, 41, 0, false));
  }
}

// T alone kept (GdnKeep::kT, FLA's footprint): the rerun forms w and u from the forward's T by two
// GEMMs (no inverse; gdn_chunk_wy_from_t_kernel, by TMA and by element-copy rows) — against the
// float64 CPU backend with the same tolerances as the rerun, over the cases above, unaligned rows,
// the sequence split and strong gates. Not the rerun's bits: w and u come from T's 16-bit rounding.
TEST_F(GdnChunkBwdGpu, KeptT) {
  std::vector<GdnCase> cases = kept_cases();
  GdnCase strong = bwd_case(DType::kFloat16, 128, 190);
  strong.g_lo = -5.0, strong.g_hi = -1.0;
  GdnCase many = bwd_case(DType::kBFloat16, 128, 130);
  many.B = 4;
  many.H = many.HV = 12;  // 4 x 12 x 2 value blocks = 96 chains: the forward forms w and u in its
                          // recurrence and writes T from its [Tu | Tw] WY kernel (the norms: the recurrence)
  many.l2norm = true;
  GdnCase many_gva = many;  // the same path with GVA, the fused gate and logit beta
  many_gva.H = 6;
  many_gva.fused_gate = many_gva.beta_logit = true;
  GdnCase no_gate = bwd_case(DType::kBFloat16, 128, 150);
  no_gate.scalar_gate = false;
  cases.push_back(strong);
  cases.push_back(many);
  cases.push_back(many_gva);
  cases.push_back(no_gate);
  int i = 0;
  for (const GdnCase& c : cases) {
    SCOPED_TRACE("case " + std::to_string(i++));
    check_backward(c, 41, 0, true, 0, GdnKeep::kT);
  }
  SCOPED_TRACE("rows padded by 2 (element copies)");
  check_backward(cases[1], 41, 2, true, 0, GdnKeep::kT);
  SCOPED_TRACE("rows padded by 2, in-op l2norm (the forward's pass, element copies)");
  check_backward(cases[3], 41, 2, true, 0, GdnKeep::kT);
  GdnCase split = bwd_case(DType::kBFloat16, 128, 1000);
  split.B = 1;
  split.H = split.HV = 2;
  split.l2norm = split.fused_gate = true;
  SCOPED_TRACE("3 segments");
  check_backward(split, 41, 0, true, 3, GdnKeep::kT);
}

// kT with the in-op l2norm keeps the inverse norms of q's and k's rows (fp32 [B, H, T]), written by
// the forward's recurrence (its row factors' norms, chunk_gate_factors) from the first value block
// of each group's first value head; the backward normalises the raw rows with them on chip. The
// same bits whichever recurrence ran — unsplit (w and u formed in it: 96+ chains) and split in 2
// (the two-warpgroup kernel's segments) — every row written (the buffer's 0xff poison gone), and
// against the float64 norms of the same rows. GVA and a tail chunk of 8 rows.
TEST_F(GdnChunkBwdGpu, KeptInverseNormsFromEitherRecurrence) {
  GdnCase c = bwd_case(DType::kFloat16, 128, 200);
  c.B = 4;
  c.H = 6;
  c.HV = 12;  // 4 x 12 x 2 = 96 chains
  c.l2norm = true;
  const GdnData d = make_gdn(c, 7);
  std::vector<uint8_t> bytes[2];
  size_t t_bytes = 0;
  for (int segments : {1, 2}) {
    DeviceBackward gpu(c, d, make_cotangents(c, 8));
    gpu.p.num_segments = segments;
    const Status st = gpu.keep_from_forward(gpu.dev, GdnKeep::kT);
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<uint8_t>& b = bytes[segments - 1];
    b.resize(gpu.kept->bytes);
    ASSERT_EQ(cudaMemcpy(b.data(), gpu.kept->ptr, b.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    GdnInputs plain = gpu.p.in;
    plain.use_qk_l2norm = false;
    t_bytes = gdn_intermediates_size(plain, GdnKeep::kT);  // T's share, before the norms
  }
  const int64_t rows = c.B * c.T, n = rows * c.H;
  const size_t one = (n * 4 + 255) / 256 * 256;
  ASSERT_EQ(bytes[0].size(), t_bytes + 2 * one);
  EXPECT_TRUE(std::equal(bytes[0].begin() + t_bytes, bytes[0].end(), bytes[1].begin() + t_bytes))
      << "the inverse norms differ between the unsplit and the split recurrence";
  double worst = 0;
  for (int which = 0; which < 2; ++which) {
    const HostTensor& x = which ? d.k : d.q;
    float rstd[1];
    for (int64_t m = 0; m < n; ++m) {  // m = row * H + h: x's [B, T, H, K] rows; kept as [B, H, T]
      const int64_t b = m / (c.T * c.H), t = m / c.H % c.T, h = m % c.H;
      std::memcpy(rstd, bytes[0].data() + t_bytes + which * one + ((b * c.H + h) * c.T + t) * 4, 4);
      double ss = 0;
      for (int64_t e = 0; e < c.K; ++e) ss += x.get(m * c.K + e) * x.get(m * c.K + e);
      const double want = 1.0 / std::sqrt(ss + kL2NormEps);
      ASSERT_TRUE(std::isfinite(rstd[0])) << (which ? "rstd_k" : "rstd_q") << " row " << m << " unwritten or not finite";
      worst = std::max(worst, std::abs(rstd[0] - want) / want);
    }
  }
  EXPECT_LT(worst, 1e-5) << "kept inverse norms against float64";
}

// kT of a varlen batch keeps the backward's slot tables (after T), written by the forward's WY
// kernel: each sequence's first slot and each slot's record {sequence, chunk or -1, first row,
// length}, against ChunkSlot's numbering worked out here — empty and 1-token sequences, a tail
// chunk, GVA. The backward then launches no tables kernel (KeptT's varlen cases use them).
TEST_F(GdnChunkBwdGpu, KeptSlotTables) {
  GdnCase c = bwd_case(DType::kBFloat16, 64, 0);
  c.B = 1;
  c.seqlens = {1, 0, 130, 64, 7};
  c.T = 202;
  c.H = 2;
  c.HV = 4;
  const GdnData d = make_gdn(c, 11);
  DeviceBackward gpu(c, d, make_cotangents(c, 12));
  const Status st = gpu.keep_from_forward(gpu.dev, GdnKeep::kT);
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<uint8_t> b(gpu.kept->bytes);
  ASSERT_EQ(cudaMemcpy(b.data(), gpu.kept->ptr, b.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  auto round256 = [](int64_t x) { return (x + 255) / 256 * 256; };
  const int64_t seqs = static_cast<int64_t>(c.seqlens.size()), slots = c.T / 64 + seqs;
  const int64_t first_at = round256(c.T * c.HV * 64 * 2), items_at = first_at + round256(seqs * 8);
  ASSERT_EQ(b.size(), static_cast<size_t>(items_at + round256(slots * 16)));
  int64_t t0 = 0;
  for (int64_t s = 0; s < seqs; ++s) {  // sequence s's chunks take the slots from t0 / 64 + s on
    const int64_t len = c.seqlens[s], first = t0 / 64 + s, next = (t0 + len) / 64 + s + 1;
    int64_t kept_first;
    std::memcpy(&kept_first, b.data() + first_at + s * 8, 8);
    EXPECT_EQ(kept_first, first) << "sequence " << s;
    for (int64_t m = first; m < next; ++m) {
      int32_t rec[4];
      std::memcpy(rec, b.data() + items_at + m * 16, 16);
      const int64_t j = m - first;
      EXPECT_EQ(rec[0], s) << "slot " << m;
      EXPECT_EQ(rec[1], j * 64 < len ? j : -1) << "slot " << m;
      EXPECT_EQ(rec[2], t0) << "slot " << m;
      EXPECT_EQ(rec[3], len) << "slot " << m;
    }
    t0 += len;
  }
}

// bwd_dhu working each chunk's dv_local out itself (BwdDhuTraits::kLocal, bwd_dhu_local.cuh) where
// its value block is 64 — more than ~33 (sequence, value head) pairs at V = 128, ~66 at V = 64 on
// a 132-SM H200 (plan_bwd_dhu) — and its reverse chain unsplit: the shapes of issue 6's bars. The
// cases above are smaller and take the dv_local kernel. Tails, varlen with empty and 1-token
// sequences, GVA, the in-op l2norm (then a pass of its own, l2norm_rows.cuh), strong, zero and no
// gates, T kept.
TEST_F(GdnChunkBwdGpu, DvLocalInsideBwdDhu) {
  GdnCase plain = bwd_case(DType::kBFloat16, 128, 130);
  plain.H = plain.HV = 20;  // 2 x 20 pairs x 2 value blocks
  GdnCase gva = bwd_case(DType::kFloat16, 64, 200);
  gva.H = 20;
  gva.HV = 40;
  gva.l2norm = gva.fused_gate = gva.beta_logit = true;
  GdnCase varlen = bwd_case(DType::kBFloat16, 128, 0);
  varlen.B = 1;
  varlen.seqlens = {1, 0, 130, 64, 65, 7};
  varlen.T = 267;
  varlen.H = 10;
  varlen.HV = 20;
  varlen.l2norm = true;
  GdnCase strong = bwd_case(DType::kFloat16, 128, 190);
  strong.B = 1;
  strong.H = strong.HV = 40;
  strong.g_lo = -5.0, strong.g_hi = -1.0;
  GdnCase zero = plain;
  zero.g_lo = zero.g_hi = 0.0;
  zero.l2norm = true;
  GdnCase none = bwd_case(DType::kBFloat16, 64, 100);
  none.H = none.HV = 40;
  none.scalar_gate = false;
  int i = 0;
  for (const GdnCase& c : {plain, gva, varlen, strong, zero, none}) {
    SCOPED_TRACE("case " + std::to_string(i++));
    const GdnGrads rerun = check_backward(c);
    expect_same_bits(rerun, check_backward(c, 41, 0, true));  // all kept: the same kernels after the rerun
  }
  SCOPED_TRACE("varlen, T kept");
  check_backward(varlen, 41, 0, true, 0, GdnKeep::kT);
  SCOPED_TRACE("GVA, T kept (the finish pass normalises the raw rows)");
  check_backward(gva, 41, 0, true, 0, GdnKeep::kT);
  // Rows padded by 8 elements: still 16-byte aligned (this path), but q, k, v and the gradients
  // strided, through the l2norm pass's row offsets and bwd_dhu's TMA boxes.
  SCOPED_TRACE("GVA, rows padded by 8");
  check_backward(gva, 41, 8);
}

// Few (sequence, value head) chains: the rerun runs the forward's sequence split (segments side by
// side, stitched), and a training forward keeps each segment's pieces; bwd_dhu splits its own
// reverse chain at the same count (bwd_dhu_split.cuh), kept or rerun. Forced segment counts (up
// to one a chunk, and a last segment shorter than the others) against the CPU backend, kept
// against rerun bit for bit at the same count, and the split's buffers in the workspace only
// when it splits.
TEST_F(GdnChunkBwdGpu, SequenceSplitRerunAndKept) {
  GdnCase c = bwd_case(DType::kBFloat16, 128, 1000);  // 16 chunks, the last 40 rows
  c.B = 1;
  c.H = c.HV = 2;
  c.l2norm = c.fused_gate = true;
  GdnCase gva = bwd_case(DType::kFloat16, 64, 700);  // 11 chunks
  gva.B = 2;
  gva.H = 1;
  gva.HV = 2;
  gva.g_lo = -0.02;  // weak decay: the stitched starts weigh on every later chunk
  int i = 0;
  for (auto [base, segments] : {std::pair{c, 2}, std::pair{c, 3}, std::pair{c, 16}, std::pair{gva, 4}, std::pair{gva, 0}}) {
    SCOPED_TRACE("case " + std::to_string(i++) + ", segments " + std::to_string(segments));
    const GdnGrads rerun = check_backward(base, 41, 0, false, segments);
    expect_same_bits(check_backward(base, 41, 0, true, segments), rerun);
  }
  const GdnData d = make_gdn(c, 41);
  DeviceBackward gpu(c, d, make_cotangents(c, 42));
  gpu.p.num_segments = 1;
  const size_t unsplit = gdn_backward_workspace_size(gpu.p);
  gpu.p.num_segments = 3;
  EXPECT_GT(gdn_backward_workspace_size(gpu.p), unsplit) << "the rerun's split takes its starts and products";
  gpu.p.num_segments = -1;
  const Status st = gpu.run();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("num_segments"), std::string::npos) << st.message();
}

TEST_F(GdnChunkBwdGpu, BitwiseDeterministic) {
  GdnCase c = bwd_case(DType::kBFloat16, 128, 200);
  c.fused_gate = c.l2norm = true;
  c.H = 1;  // GVA: dq, dk summed over 4 value heads
  const GdnData d = make_gdn(c, 5);
  DeviceBackward gpu(c, d, make_cotangents(c, 6));
  ASSERT_TRUE(gpu.run().ok());
  const GdnGrads first = gpu.host;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(gpu.run().ok());
    expect_same_bits(first, gpu.host);
  }
}

TEST_F(GdnChunkBwdGpu, PerKeyGateIsRefusedClearly) {
  GdnCase c = bwd_case(DType::kBFloat16, 64, 10);
  c.scalar_gate = false;
  c.per_key_gate = true;
  const GdnData d = make_gdn(c, 3);
  DeviceBackward gpu(c, d, make_cotangents(c, 4));
  const Status st = gpu.run();
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("gk"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace attnkit::test
