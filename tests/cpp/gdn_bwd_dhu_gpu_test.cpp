// tests/cpp/gdn_bwd_dhu_gpu_test.cpp — the CUDA reverse state-gradient pass (bwd_dhu) against the
// CPU backend's float64 run on the same 16-bit inputs (the CPU op is itself checked by finite
// differences in gdn_bwd_dhu_test.cpp), with FLA's metric RMS(err) / RMS(ref) and its 0.008
// gradient tolerance (spec/gdn.md) on dh, dh0 and dv2. Outputs NaN-poisoned before every launch.
//
// Inputs are shaped like the real pass's: unit-norm keys, w = beta * k (so the per-chunk map
// dH -> e^G dH - w^T K dH stays contractive, as the WY form's is), in-chunk cumulative gates.
#include <memory>

#include "gpu_util.hpp"

namespace attnkit::test {
namespace {

struct DhuGpuCase {
  DType dt = DType::kBFloat16;
  int64_t B = 2, T = 200, H = 2, HV = 4, K = 128, V = 128;
  std::vector<int64_t> seqlens;  // non-empty: varlen (B = 1, T = their sum)
  enum Gate { kNone, kScalar, kPerKey } gate = kScalar;
  double g_lo = -0.1, g_hi = 0.0;  // per-token log-decay range (then summed inside each chunk)
  bool dht = true, dh0 = true;
  DType dht_dtype = DType::kFloat32;  // dht's own dtype (any float type)
  int64_t state_pad = 0;  // > 0: rows of dht and dh0 padded (4: still 16-byte aligned; else not)
  StateLayout layout = StateLayout::kKV;
  int64_t row_pad = 0;  // > 0: rows of q, k, w, dout, dv padded (no 16-byte loads)
  bool gates_log2 = false;  // the GPU op gets g / ln 2 and gates_log2 (the reference: natural log)
  int num_segments = 0;     // GdnBwdDhuParams::num_segments of the GPU op
  int64_t N() const { return seqlens.empty() ? B : static_cast<int64_t>(seqlens.size()); }
  int64_t chunks() const {
    if (seqlens.empty()) return (T + 63) / 64;
    int64_t n = 0;
    for (int64_t l : seqlens) n += (l + 63) / 64;
    return n;
  }
};

struct DhuTensors {
  HostTensor q, k, w, dout, dv, g, dht, cu;
};

DhuTensors make_inputs(const DhuGpuCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  DhuTensors t;
  HostTensor q(DType::kFloat64, {c.B, c.T, c.H, c.K}), k = q, w(DType::kFloat64, {c.B, c.T, c.HV, c.K});
  q.randn(rng);
  k.randn(rng);
  for (int64_t r = 0; r < c.B * c.T * c.H; ++r) {  // unit-norm key rows
    double ss = 1e-12;
    for (int64_t i = 0; i < c.K; ++i) ss += k.get(r * c.K + i) * k.get(r * c.K + i);
    for (int64_t i = 0; i < c.K; ++i) k.set(r * c.K + i, k.get(r * c.K + i) / std::sqrt(ss));
  }
  std::uniform_real_distribution<double> beta(0.1, 0.9);
  for (int64_t r = 0; r < c.B * c.T * c.HV; ++r) {  // w row of value head hv = beta * k row of its q/k head
    const int64_t hv = r % c.HV, bt = r / c.HV, h = hv / (c.HV / c.H), b = beta(rng);
    for (int64_t i = 0; i < c.K; ++i) w.set(r * c.K + i, b * k.get((bt * c.H + h) * c.K + i));
  }
  t.q = q.to(c.dt);
  t.k = k.to(c.dt);
  t.w = w.to(c.dt);
  t.dout = HostTensor(c.dt, {c.B, c.T, c.HV, c.V});
  t.dout.randn(rng);
  t.dv = t.dout;
  t.dv.randn(rng);
  const int64_t gw = c.gate == DhuGpuCase::kPerKey ? c.K : 1;
  if (c.gate != DhuGpuCase::kNone) {  // in-chunk cumulative sums of per-token log-decays
    t.g = gw == 1 ? HostTensor(DType::kFloat32, {c.B, c.T, c.HV}) : HostTensor(DType::kFloat32, {c.B, c.T, c.HV, gw});
    std::uniform_real_distribution<double> gd(c.g_lo, c.g_hi);
    std::vector<int64_t> starts = {0};  // token index of every sequence start
    for (int64_t l : c.seqlens) starts.push_back(starts.back() + l);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t hv = 0; hv < c.HV; ++hv)
        for (int64_t x = 0; x < gw; ++x) {
          double run = 0;
          size_t seq = 0;
          for (int64_t tok = 0; tok < c.T; ++tok) {
            int64_t since = tok;  // tokens since the sequence start
            if (!c.seqlens.empty()) {
              while (seq + 1 < starts.size() && starts[seq + 1] <= tok) ++seq;
              since = tok - starts[seq];
            }
            if (since % 64 == 0) run = 0;
            run += gd(rng);
            t.g.set(((b * c.T + tok) * c.HV + hv) * gw + x, run);
          }
        }
  }
  const bool kv = c.layout == StateLayout::kKV;
  if (c.dht) {
    t.dht = HostTensor(DType::kFloat32, {c.N(), c.HV, kv ? c.K : c.V, kv ? c.V : c.K});
    t.dht.randn(rng);
    if (c.dht_dtype != DType::kFloat32) t.dht = t.dht.to(c.dht_dtype);
  }
  if (!c.seqlens.empty()) {
    std::vector<int64_t> cu = {0};
    for (int64_t l : c.seqlens) cu.push_back(cu.back() + l);
    t.cu = index_tensor(DType::kInt64, cu);
  }
  return t;
}

struct DhuOutputs {
  HostTensor dh, dh0, dv2;
};

DhuOutputs make_outputs(const DhuGpuCase& c, DType dt) {
  const bool kv = c.layout == StateLayout::kKV;
  const int64_t r = kv ? c.K : c.V, cc = kv ? c.V : c.K;
  DhuOutputs o;
  o.dh = HostTensor(dt, {c.B, c.chunks(), c.HV, r, cc});
  if (c.dh0) o.dh0 = HostTensor(dt == DType::kFloat64 ? dt : DType::kFloat32, {c.N(), c.HV, r, cc});
  o.dv2 = HostTensor(dt, {c.B, c.T, c.HV, c.V});
  return o;
}

GdnBwdDhuParams params(const DhuGpuCase& c, const DhuTensors& t, const DhuOutputs& o) {
  GdnBwdDhuParams p;
  p.q = t.q.view;
  p.k = t.k.view;
  p.w = t.w.view;
  p.dout = t.dout.view;
  p.dv = t.dv.view;
  if (c.gate == DhuGpuCase::kScalar) p.g = t.g.view;
  if (c.gate == DhuGpuCase::kPerKey) p.gk = t.g.view;
  p.dht = t.dht.view;
  p.cu_seqlens = t.cu.view;
  p.state_layout = c.layout;
  p.dh = o.dh.view;
  p.dh0 = o.dh0.view;
  p.dv2 = o.dv2.view;
  return p;
}

// Device copies of a case's inputs and outputs (outputs NaN-poisoned), seen as host-shaped
// DhuTensors / DhuOutputs whose views point at the device.
struct DeviceDhu {
  std::vector<std::unique_ptr<DeviceTensor>> bufs;
  DhuTensors in;
  DhuOutputs out;
  DeviceTensor *dh = nullptr, *dh0 = nullptr, *dv2 = nullptr;
  DeviceDhu(const DhuTensors& h, const DhuOutputs& o) : in(h), out(o) {
    for (auto [src, dst] : {std::pair{&h.q, &in.q}, std::pair{&h.k, &in.k}, std::pair{&h.w, &in.w},
                            std::pair{&h.dout, &in.dout}, std::pair{&h.dv, &in.dv}, std::pair{&h.g, &in.g},
                            std::pair{&h.dht, &in.dht}, std::pair{&h.cu, &in.cu}})
      mirror(*src, *dst);
    dh = mirror(o.dh, out.dh);
    dh0 = mirror(o.dh0, out.dh0);
    dv2 = mirror(o.dv2, out.dv2);
    for (DeviceTensor* d : {dh, dh0, dv2})
      if (d) d->poison();
  }
  // A device copy of h behind target's view; nothing for an absent tensor.
  DeviceTensor* mirror(const HostTensor& h, HostTensor& target) {
    if (!h.view.defined()) return nullptr;
    bufs.push_back(std::make_unique<DeviceTensor>(h));
    target.view = bufs.back()->view;
    return bufs.back().get();
  }
};

// Reference: the CPU op in float64 on the same rounded values.
DhuOutputs reference_dhu(const DhuGpuCase& c, const DhuTensors& t) {
  DhuTensors t64 = t;
  for (HostTensor* x : {&t64.q, &t64.k, &t64.w, &t64.dout, &t64.dv}) *x = x->to(DType::kFloat64);
  DhuOutputs ref = make_outputs(c, DType::kFloat64);
  const Status st = gdn_bwd_dhu(params(c, t64, ref));
  EXPECT_TRUE(st.ok()) << st.message();
  return ref;
}

// The GPU pass on t (rows padded as the case asks); its outputs, NaN-poisoned first, back in out.
void run_dhu(const DhuGpuCase& c, const DhuTensors& t, DhuOutputs& out) {
  DhuTensors tp = t;
  if (c.row_pad)
    for (HostTensor* x : {&tp.q, &tp.k, &tp.w, &tp.dout, &tp.dv}) *x = padded_rows(*x, c.row_pad);
  out = make_outputs(c, c.dt);
  if (c.state_pad) {
    if (tp.dht.view.defined()) tp.dht = padded_rows(tp.dht, c.state_pad);
    if (out.dh0.view.defined()) out.dh0 = padded_rows(out.dh0, c.state_pad);
  }
  if (c.gates_log2)
    for (int64_t i = 0; i < tp.g.numel(); ++i) tp.g.set(i, t.g.get(i) / std::log(2.0));
  DeviceDhu dev(tp, out);
  GdnBwdDhuParams p = params(c, dev.in, dev.out);
  p.gates_log2 = c.gates_log2;
  p.num_segments = c.num_segments;
  const DeviceScratch ws(gdn_bwd_dhu_workspace_size(p));
  p.workspace = ws.workspace();
  const Status st = gdn_bwd_dhu(p);
  ASSERT_TRUE(st.ok()) << st.message();
  dev.dh->copy_to(out.dh);
  dev.dv2->copy_to(out.dv2);
  if (dev.dh0) dev.dh0->copy_to(out.dh0);
}

void check_dhu(const DhuGpuCase& c, uint32_t seed = 11) {
  const DhuTensors t = make_inputs(c, seed);
  const DhuOutputs ref = reference_dhu(c, t);
  DhuOutputs out;
  ASSERT_NO_FATAL_FAILURE(run_dhu(c, t, out));
  for (auto [got, want, name] : {std::tuple{&out.dh, &ref.dh, "dh"}, std::tuple{&out.dv2, &ref.dv2, "dv2"},
                                 std::tuple{&out.dh0, &ref.dh0, "dh0"}}) {
    if (!got->view.defined()) continue;
    const auto g = got->values();
    ASSERT_TRUE(all_finite(g)) << name << ": unwritten or non-finite values";
    EXPECT_LT(rel_rms(g, want->values()), 0.008) << name;
  }
}

class GdnBwdDhuGpu : public GpuTest {};

TEST_F(GdnBwdDhuGpu, DtypesHeadDimsAndTails) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (auto [K, V] : {std::pair{128, 128}, std::pair{64, 64}, std::pair{64, 128}})
      for (int64_t T : {1, 63, 200}) {
        SCOPED_TRACE("dtype=" + std::to_string(int(dt)) + " K=" + std::to_string(K) + " V=" + std::to_string(V) +
                     " T=" + std::to_string(T));
        DhuGpuCase c;
        c.dt = dt;
        c.K = K;
        c.V = V;
        c.T = T;
        check_dhu(c);
      }
}

TEST_F(GdnBwdDhuGpu, GatesNoneStrongZeroAndPerKey) {
  DhuGpuCase c;
  c.T = 300;
  c.gate = DhuGpuCase::kNone;
  check_dhu(c);
  c.gate = DhuGpuCase::kScalar;
  for (auto [lo, hi] : {std::pair{-5.0, -1.0}, std::pair{0.0, 0.0}}) {
    SCOPED_TRACE("g in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    c.g_lo = lo;
    c.g_hi = hi;
    check_dhu(c);
  }
  c.gate = DhuGpuCase::kPerKey;
  for (auto [lo, hi] : {std::pair{-0.1, 0.0}, std::pair{-3.0, 0.0}}) {
    SCOPED_TRACE("gk in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    c.g_lo = lo;
    c.g_hi = hi;
    check_dhu(c);
  }
}

TEST_F(GdnBwdDhuGpu, GatesInLog2Units) {
  DhuGpuCase c;
  c.T = 300;
  c.gates_log2 = true;
  for (auto gate : {DhuGpuCase::kScalar, DhuGpuCase::kPerKey}) {
    SCOPED_TRACE(gate == DhuGpuCase::kScalar ? "g" : "gk");
    c.gate = gate;
    c.g_lo = -1.0;  // strong enough that natural-log and base-2 readings differ by far more than 0.008
    check_dhu(c);
  }
}

TEST_F(GdnBwdDhuGpu, VarlenWithShortAndEmptySequencesAndGva) {
  for (auto [H, HV] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{1, 4}}) {
    DhuGpuCase c;
    c.B = 1;
    c.seqlens = {1, 0, 130, 64, 65, 7};
    c.T = 267;
    c.H = H;
    c.HV = HV;
    check_dhu(c);
    c.gate = DhuGpuCase::kPerKey;
    check_dhu(c);
  }
}

// 3000 sequences: the chunk-offset scan runs over several 256-sequence rounds.
TEST_F(GdnBwdDhuGpu, ThousandsOfShortSequences) {
  DhuGpuCase c;
  c.B = 1;
  c.K = c.V = 64;
  c.H = 1;
  c.HV = 2;
  for (int i = 0; i < 3000; ++i) c.seqlens.push_back(i % 4);
  c.seqlens[2345] = 150;
  c.T = 0;
  for (int64_t l : c.seqlens) c.T += l;
  check_dhu(c);
}

TEST_F(GdnBwdDhuGpu, VFirstLayoutNoStatesAndUnalignedRows) {
  DhuGpuCase c;
  c.layout = StateLayout::kVK;
  check_dhu(c);
  c.layout = StateLayout::kKV;
  c.dht = c.dh0 = false;
  c.row_pad = 4;
  check_dhu(c);
}

// fp32 dht and dh0 go by 16-byte pieces of their rows where the rows allow (bwd_dhu_ends.cuh),
// element-wise where not: rows padded by 4 (still aligned, a row stride past V) and by 1 (not
// aligned), at value blocks wide enough for the pieces (64 columns here), beside unpadded rows.
TEST_F(GdnBwdDhuGpu, StateRowsAlignedOrNot) {
  for (int64_t D : {64, 128})
    for (int64_t pad : {0, 4, 1}) {
      SCOPED_TRACE("K=V=" + std::to_string(D) + " state rows padded by " + std::to_string(pad));
      DhuGpuCase c;
      c.B = 3;
      c.T = 130;
      c.H = 8;
      c.HV = 32;
      c.K = c.V = D;
      c.state_pad = pad;
      check_dhu(c);
    }
}

// dht in each float dtype, in both state layouts: the state warpgroup switches on its dtype once
// for all its elements (token_tensor.cuh, load_any_floats), a path of its own per dtype. The
// reference reads the same rounded values.
TEST_F(GdnBwdDhuGpu, FinalStateGradientInEveryDtype) {
  for (DType sdt : {DType::kBFloat16, DType::kFloat16, DType::kFloat64})
    for (StateLayout layout : {StateLayout::kKV, StateLayout::kVK})
      for (int64_t D : {64, 128}) {
        SCOPED_TRACE("dht dtype=" + std::to_string(int(sdt)) + " layout=" + std::to_string(int(layout)) +
                     " K=V=" + std::to_string(D));
        DhuGpuCase c;
        c.dht_dtype = sdt;
        c.layout = layout;
        c.K = c.V = D;
        c.T = 130;
        check_dhu(c);
      }
}

// Enough (sequence, value head) pairs that the dispatch picks 64-column value blocks.
TEST_F(GdnBwdDhuGpu, WideValueBlocks) {
  DhuGpuCase c;
  c.B = 3;
  c.T = 130;
  c.H = 8;
  c.HV = 32;
  check_dhu(c);
}

// Each value block the dispatch picks (16, 32, 64 columns: the widest whose CTAs leave at most
// half of the SMs idle, bwd_dhu_dispatch.cu): B chosen from this device's SM count so that each
// width runs, at both key head dims and both 16-bit types.
TEST_F(GdnBwdDhuGpu, EachValueBlockWidth) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t D : {64, 128})
      for (int64_t bv : {16, 32, 64}) {
        // bv = 16: one (sequence, value head) pair; else the fewest pairs whose bv-column blocks
        // fill more than half of the SMs, so that blocks of 2 bv columns would not.
        const int64_t pairs = bv == 16 ? 1 : sms / (2 * (D / bv)) + 1;
        SCOPED_TRACE("dtype=" + std::to_string(int(dt)) + " K=V=" + std::to_string(D) + " value block " +
                     std::to_string(bv) + " B=" + std::to_string(pairs));
        DhuGpuCase c;
        c.dt = dt;
        c.K = c.V = D;
        c.B = pairs;
        c.H = c.HV = 1;
        c.T = 130;
        check_dhu(c);
      }
}

// A TMA box reads on past a sequence's end into the next sequence's rows (row_tma.cuh): NaN in
// every input row of sequence 1 (q, k, w, do, dv, g) must stay there. Sequence 0's last chunk
// (tokens 64..69) is the one whose boxes reach into it; sequence 2's are past the tensor's end.
// Sequences 0 and 2 (dv2 rows, dh chunks, dh0) checked against the CPU op on the clean inputs.
TEST_F(GdnBwdDhuGpu, NonFiniteRowsStayInTheirSequence) {
  for (int64_t D : {64, 128}) {
    SCOPED_TRACE("K = V = " + std::to_string(D));
    DhuGpuCase c;
    c.B = 1;
    c.K = c.V = D;
    c.seqlens = {70, 130, 60};  // chunks 0-1, 2-4, 5
    c.T = 260;
    const DhuTensors t = make_inputs(c, 23);
    const DhuOutputs ref = reference_dhu(c, t);
    DhuTensors bad = t;
    for (HostTensor* x : {&bad.q, &bad.k, &bad.w, &bad.dout, &bad.dv, &bad.g}) {
      const int64_t per_token = x->numel() / c.T;  // [1, T, ...]
      for (int64_t i = 70 * per_token; i < 200 * per_token; ++i) x->set(i, std::nan(""));
    }
    DhuOutputs out;
    ASSERT_NO_FATAL_FAILURE(run_dhu(c, bad, out));
    const int64_t per_token = c.HV * c.V, per_state = c.HV * c.K * c.V;
    for (auto [n, t0, t1, c0, c1] : {std::tuple{0, 0, 70, 0, 2}, std::tuple{2, 200, 260, 5, 6}}) {
      SCOPED_TRACE("sequence " + std::to_string(n));
      for (auto [got, want, first, last, each, name] :
           {std::tuple{&out.dv2, &ref.dv2, t0, t1, per_token, "dv2"}, std::tuple{&out.dh, &ref.dh, c0, c1, per_state, "dh"},
            std::tuple{&out.dh0, &ref.dh0, n, n + 1, per_state, "dh0"}}) {
        const auto all = got->values(), want_all = want->values();
        const std::vector<double> g(all.begin() + first * each, all.begin() + last * each);
        const std::vector<double> w(want_all.begin() + first * each, want_all.begin() + last * each);
        ASSERT_TRUE(all_finite(g)) << name << ": another sequence's NaN";
        EXPECT_LT(rel_rms(g, w), 0.008) << name;
      }
    }
  }
}

// The reverse chain's sequence split (bwd_dhu_split.cuh): forced segment counts (2; 3, one stitch
// step; 5, four segments of 4 chunks) and the automatic plan (two (sequence, value head) pairs of
// 64 chunks: it splits), every gate kind, with and without dht, both key
// head dims and 16-bit types, a tail chunk; each against the CPU op. The workspace grows only when
// the split runs (its starts and A: the plan took it); unaligned rows and varlen batches are not
// split (no workspace), and still right.
TEST_F(GdnBwdDhuGpu, SequenceSplit) {
  auto split_case = [](int segments) {
    DhuGpuCase c;
    c.B = 1;
    c.H = 1;
    c.HV = 2;
    c.T = 16 * 64 - 9;  // 16 chunks, the last of 55 rows
    c.num_segments = segments;
    return c;
  };
  auto workspace_of = [](const DhuGpuCase& c) {  // on device tensors (a host tensor's is 0)
    const DeviceDhu dev(make_inputs(c, 5), make_outputs(c, c.dt));
    GdnBwdDhuParams p = params(c, dev.in, dev.out);
    p.num_segments = c.num_segments;
    return gdn_bwd_dhu_workspace_size(p);
  };
  EXPECT_EQ(workspace_of(split_case(1)), 0u);
  for (int segments : {2, 3, 5, 0}) {
    DhuGpuCase c = split_case(segments);
    if (segments == 0) c.T = 64 * 64 - 9;  // long enough for the plan to split
    SCOPED_TRACE("num_segments=" + std::to_string(segments));
    EXPECT_GT(workspace_of(c), 0u);
    for (auto gate : {DhuGpuCase::kNone, DhuGpuCase::kScalar, DhuGpuCase::kPerKey}) {
      SCOPED_TRACE("gate " + std::to_string(int(gate)));
      c.gate = gate;
      check_dhu(c);
    }
  }
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (int64_t D : {64, 128}) {
      SCOPED_TRACE("dtype=" + std::to_string(int(dt)) + " K=V=" + std::to_string(D));
      DhuGpuCase c = split_case(3);
      c.dt = dt;
      c.K = c.V = D;
      c.B = 2;
      c.g_lo = -1.0;  // strong gates
      check_dhu(c);
      c.dht = false;  // segment 0 from 0
      check_dhu(c);
    }
  DhuGpuCase unaligned = split_case(3);
  unaligned.row_pad = 4;
  check_dhu(unaligned);
  DhuGpuCase varlen = split_case(3);
  varlen.seqlens = {500, 515};
  EXPECT_EQ(workspace_of(varlen), 256u);  // the two sequences' chunk offsets only
  check_dhu(varlen);
}

TEST_F(GdnBwdDhuGpu, RefusesWhatItDoesNotTake) {
  DhuGpuCase c;
  c.T = 70;
  c.dt = DType::kFloat32;
  DeviceDhu dev(make_inputs(c, 3), make_outputs(c, c.dt));
  const Status st = gdn_bwd_dhu(params(c, dev.in, dev.out));
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("q:"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace attnkit::test
