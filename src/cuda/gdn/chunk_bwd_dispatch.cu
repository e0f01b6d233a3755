// src/cuda/gdn/chunk_bwd_dispatch.cu — GdnBwdParams -> the chunked backward on the GPU, in order:
//   1. unless the forward kept them (GdnFwdParams::intermediates, GdnKeep::kAll): the forward's WY
//      kernel (w, u, gamma, T; with T kept, GdnKeep::kT, w, u and gamma from it by two GEMMs) and
//      its recurrence without output, keeping each chunk's start state and v_new (with few
//      chains, as the forward's sequence split: GdnBwdParams::num_segments)
//   2. dv_local (per chunk; with the in-op l2norm it also writes q, k normalised into the
//      workspace, which every later kernel reads — unless the forward kept their inverse norms
//      with T: then every kernel normalises the raw rows on chip) — inside bwd_dhu where it can
//      (dhu_local below; the l2norm then a pass of its own, or none)
//   3. bwd_dhu (dh per chunk, dv2, dh0; reverse over chunks; with few chains, split likewise)
//   4. the per-chunk gradients (dq, dk per value head, dv, dbeta, dg)
//   5. the token passes: GVA sums and the in-op l2norm / sigmoid / fused-gate backward
// and the workspace all of that lives in.
#include <cuda_runtime.h>
#include <cutlass/numeric_types.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "src/cuda/cuda_status.hpp"
#include "src/cuda/gdn/api.hpp"
#include "src/cuda/gdn/chunk_bwd_args.cuh"
#include "src/cuda/gdn/chunk_host.hpp"
#include "src/cuda/gdn/host_tensors.hpp"
#include "src/cuda/unit_strides.hpp"

namespace attnkit::cuda {
namespace gdn {
template <class E, int kD>
cudaError_t launch_gdn_chunk_bwd(const ChunkBwdArgs& a, int64_t slots, bool dv_local, cudaStream_t stream);
template <class E, int kD>
cudaError_t launch_gdn_bwd_finish(const BwdFinishArgs& a, cudaStream_t stream);
template <class E, int kD>
cudaError_t launch_gdn_l2norm_rows(const L2NormRowsArgs& a, cudaStream_t stream);

Status launch_l2norm_rows(const GdnInputs& in, const RowTensor& qn, const RowTensor& kn, const RowTensor& rstd_q,
                          const RowTensor& rstd_k, cudaStream_t stream) {
  const bool varlen = in.cu_seqlens.defined();
  L2NormRowsArgs a;
  a.q = row_tensor(in.q, varlen);
  a.k = row_tensor(in.k, varlen);
  a.vec16 = rows_aligned(in.q, varlen, 16) && rows_aligned(in.k, varlen, 16);
  a.qn = qn;
  a.kn = kn;
  a.rstd_q = rstd_q;
  a.rstd_k = rstd_k;
  a.B = in.q.size(0);
  a.T = in.q.size(1);
  a.H = static_cast<int>(in.q.size(2));
  const bool bf16 = in.q.dtype == DType::kBFloat16;
  cudaError_t err;
  if (in.q.size(3) == 128) err = bf16 ? launch_gdn_l2norm_rows<cutlass::bfloat16_t, 128>(a, stream) : launch_gdn_l2norm_rows<cutlass::half_t, 128>(a, stream);
  else err = bf16 ? launch_gdn_l2norm_rows<cutlass::bfloat16_t, 64>(a, stream) : launch_gdn_l2norm_rows<cutlass::half_t, 64>(a, stream);
  return cuda_status(err, "gdn_l2norm");
}

// Varlen: the chunk slot of each sequence's first chunk (ChunkSlot::first), bwd_dhu's dh offsets;
// and each slot's record {sequence, chunk (-1 past the sequence's last), the sequence's first row,
// its length} (ChunkBwdArgs::slot_items), by ChunkSlot's own bisection once a slot. The rows are
// cast to 32 bits: the dispatch asks for the records (items not null) only where they fit.
__global__ void gdn_slot_tables_kernel(const int64_t* cu, int64_t n, int64_t* first, int64_t slots, int4* items) {
  const int64_t m = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (m < n) first[m] = cu[m] / 64 + m;
  if (items && m < slots) {
    struct { const int64_t* cu_seqlens; int64_t tokens; int num_seqs; } a{cu, 0, static_cast<int>(n)};
    items[m] = slot_record(a, ChunkSlot(a, m));
  }
}
}  // namespace gdn

namespace {

// One buffer after the other, each 256-byte aligned; sizes from the inputs alone. Without the
// forward's intermediates they come first here (the same layout), the rerun's u after them.
struct BwdWorkspace {
  int64_t rows = 0, T = 0, H = 0, HV = 0, D = 0, slots = 0, seqs = 0;
  size_t qn = 0, kn = 0, rstd_q = 0, rstd_k = 0, u = 0, dv2 = 0, dh = 0;
  size_t dq = 0, dk = 0, dbeta = 0, dg = 0, first = 0, slot_items = 0, starts = 0, prods = 0, dhu_starts = 0, dhu_prods = 0, total = 0;
  bool rerun = false;   // the forward's pieces recomputed into this workspace
  bool t_kept = false;  // ... but T, the forward's (GdnKeep::kT)
  bool norms_kept = false;  // ... and with the in-op l2norm rstd_q, rstd_k (Intermediates)
  gdn::SplitPlan split;  // the rerun's sequence split, the forward's plan for these inputs
  gdn::DhuPlan dhu;      // bwd_dhu's value block and split of its own
  explicit BwdWorkspace(const GdnBwdParams& p) {
    const GdnInputs& in = p.in;
    if (!gdn::check_chunked_supported(in).ok()) return;
    const bool varlen = in.cu_seqlens.defined();
    T = in.q.size(1);
    rows = in.q.size(0) * T;
    H = in.q.size(2);
    HV = in.v.size(2);
    D = in.q.size(3);
    seqs = varlen ? in.cu_seqlens.size(0) - 1 : in.q.size(0);
    slots = gdn::wy_slot_count(T, seqs, varlen);
    gdn::BufferLayout at;
    t_kept = p.intermediates.data != nullptr && p.keep == GdnKeep::kT;
    rerun = p.intermediates.data == nullptr || t_kept;
    if (rerun) (void)gdn::Intermediates(in, at, !t_kept);  // at offset 0
    // kT with the in-op l2norm: the rows' inverse norms come from the forward's buffer
    norms_kept = t_kept && in.use_qk_l2norm;
    if (in.use_qk_l2norm && !norms_kept) {
      qn = at.take(rows * H * D * 2);
      kn = at.take(rows * H * D * 2);
      rstd_q = at.take(rows * H * 4);
      rstd_k = at.take(rows * H * 4);
    }
    u = at.take(rows * HV * D * 2);  // the rerun's u, then dv_local (u is spent once the recurrence is done)
    dv2 = at.take(rows * HV * D * 2);
    dh = at.take(slots * HV * D * D * 2);
    if (HV != H) {  // GVA: dq, dk per value head, summed by the finish pass
      dq = at.take(rows * HV * D * 4);
      dk = at.take(rows * HV * D * 4);
    }
    dbeta = at.take(rows * HV * 4);
    dg = at.take(rows * HV * 4);
    if (varlen) {
      first = at.take(seqs * 8);
      slot_items = at.take(slots * 16);
    }
    if (rerun) split = gdn::plan_split_for(in, p.num_segments);
    if (split.count > 1) {  // the segments' starts [N, count, HV, D, D] and P^T, fp32
      starts = at.take(in.q.size(0) * split.count * HV * D * D * 4);
      prods = at.take(in.q.size(0) * split.count * HV * D * D * 4);
    }
    dhu = gdn::plan_bwd_dhu_for((T + 63) / 64, seqs * HV, D, D, !varlen, p.num_segments);
    if (dhu.split.count > 1) {  // its segments' starts and A, fp32 (bwd_dhu_split.cuh)
      dhu_starts = at.take(seqs * dhu.split.count * HV * D * D * 4);
      dhu_prods = at.take(seqs * dhu.split.count * HV * D * D * 4);
    }
    total = at.total;
  }
  // [rows, heads, width] at offset `at` as RowTensor (element strides); for optional_rows, at == 0
  // means not taken (every optional buffer comes after u).
  gdn::RowTensor rows_of(char* base, size_t at, int64_t heads, int64_t width) const {
    return {base + at, T * heads * width, heads * width, width};
  }
  gdn::RowTensor optional_rows(char* base, size_t at, int64_t heads, int64_t width) const {
    return at ? rows_of(base, at, heads, width) : gdn::RowTensor{};
  }
};

Status check_supported(const GdnBwdParams& p) {
  ATTNKIT_RETURN_IF_ERROR(gdn::check_chunked_supported(p.in));
  for (auto [t, name] : {std::pair{&p.dout, "dout"}, std::pair{&p.dq, "dq"}, std::pair{&p.dk, "dk"}, std::pair{&p.dv, "dv"}}) {
    if (t->dtype != p.in.q.dtype) return Unsupported(std::string(name) + ": the CUDA chunked backward expects q's dtype");
    if (t->strides[3] != 1) return InvalidArgument(std::string(name) + ": expected unit stride on the last dim");
  }
  if (!gdn::rows_aligned(p.dv, p.in.cu_seqlens.defined(), 4))
    return Unsupported("dv: the CUDA chunked backward writes element pairs: rows must start 4-byte aligned");
  return Status::Ok();
}

template <class E, int kD>
Status run_backward(const GdnBwdParams& p, const BwdWorkspace& ws, char* base, cudaStream_t stream) {
  const GdnInputs& in = p.in;
  const bool varlen = in.cu_seqlens.defined();
  // With the op's l2norm the forward's kernels (the rerun) normalise q, k on load, as the forward
  // did. The kernels after them: where the forward kept T (GdnKeep::kT) it kept the rows' inverse
  // norms too, and they take the raw rows and normalise on chip with them (fold_norms: bwd_dhu
  // through its row factors, the per-chunk kernels in shared memory, qn / kn's bits); else they
  // read q, k normalised (qn, kn and the inverse norms) worked out here into the workspace — by the
  // dv_local kernel, or by a pass of their own where bwd_dhu works dv_local out.
  const bool l2norm = in.use_qk_l2norm;

  // 1. The forward's pieces: kept by the forward, or recomputed here.
  gdn::ChunkFwdArgs f;
  ATTNKIT_RETURN_IF_ERROR(gdn::chunk_forward_args(in, f));
  char* kept = static_cast<char*>(p.intermediates.data);
  gdn::BufferLayout at, kept_at;
  gdn::Intermediates(in, at, !ws.t_kept).point(f, ws.rerun ? base : kept);
  gdn::ChunkFwdArgs norms;  // rstd_q, rstd_k where the forward kept them (ws.norms_kept)
  if (ws.t_kept) {
    gdn::Intermediates(in, kept_at, true, false, true).point(norms, kept);
    f.tmat = norms.tmat;
    f.wy_from_t = true;
    // At K = 128 with 16-byte rows, unsplit and with enough chains (the forward's rule for w and
    // u in the recurrence, chunk_fwd_dispatch.cu): no WY kernel; the recurrence forms w and u
    // from T itself and writes w and gamma out (gdn_chunk_fwd_wu_kernel<T, true>).
    f.wu_in_recurrence = kD == 128 && f.vec16 && ws.split.count <= 1 && int64_t(f.num_seqs) * f.HV * f.v_blocks >= gdn::kWuInRecurrenceChains;
  }
  f.u = ws.rows_of(base, ws.u, ws.HV, kD);
  if (ws.split.count > 1) {
    f.split.count = ws.split.count;
    f.split.chunks = ws.split.chunks;
    f.split.starts = reinterpret_cast<float*>(base + ws.starts);
    f.split.prods = reinterpret_cast<float*>(base + ws.prods);
  }
  if (ws.rerun) ATTNKIT_RETURN_IF_ERROR(gdn::launch_chunk_forward(f, in.q.dtype, kD, stream));

  // Varlen: the slot tables (bwd_dhu's first slots; the per-chunk kernels' slot records, whose
  // rows are 32-bit) — the forward's where it kept T (Intermediates: its WY kernel wrote them).
  const bool varlen_seqs = varlen && ws.seqs > 0;
  const bool tables_kept = varlen_seqs && norms.kept_slot_items != nullptr;
  int4* const own_items = varlen_seqs && ws.rows < INT32_MAX ? reinterpret_cast<int4*>(base + ws.slot_items) : nullptr;
  const int4* const slot_items = tables_kept ? norms.kept_slot_items : own_items;
  const int64_t* const first_slots = tables_kept ? norms.kept_first : reinterpret_cast<int64_t*>(base + ws.first);
  if (varlen_seqs && !tables_kept) {
    const int64_t n = std::max(ws.seqs, ws.slots);
    gdn::gdn_slot_tables_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
        f.cu_seqlens, ws.seqs, reinterpret_cast<int64_t*>(base + ws.first), ws.slots, own_items);
    ATTNKIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "gdn_backward"));
  }

  // 2. dv_local, into u's buffer (unless bwd_dhu works it out).
  gdn::ChunkBwdArgs b;
  b.q = gdn::row_tensor(in.q, varlen);
  b.k = gdn::row_tensor(in.k, varlen);
  b.v = gdn::row_tensor(in.v, varlen);
  b.dout = gdn::row_tensor(p.dout, varlen);
  b.beta = token_tensor(in.beta, varlen);
  b.beta_logit = in.beta_is_logit;
  b.gamma = f.gamma;
  b.tmat = f.tmat;
  b.vnew = f.vnew;
  b.states = f.states;
  b.dh = base + ws.dh;
  b.dv_local = f.u;
  b.dv2 = ws.rows_of(base, ws.dv2, ws.HV, kD);
  b.dv = gdn::row_tensor(p.dv, varlen);
  b.dq = ws.optional_rows(base, ws.dq, ws.HV, kD);
  b.dk = ws.optional_rows(base, ws.dk, ws.HV, kD);
  b.direct = ws.H == ws.HV;  // no GVA: dq, dk final in the per-chunk kernel
  b.dq_out = gdn::row_tensor(p.dq, varlen);
  b.dk_out = gdn::row_tensor(p.dk, varlen);
  if (ws.norms_kept) {
    b.fold_norms = true;
    b.rstd_q = norms.rstd_q;
    b.rstd_k = norms.rstd_k;
  } else if (l2norm) {
    b.normalize = true;
    b.qn = ws.rows_of(base, ws.qn, ws.H, kD);
    b.kn = ws.rows_of(base, ws.kn, ws.H, kD);
    b.rstd_q = ws.rows_of(base, ws.rstd_q, ws.H, 1);
    b.rstd_k = ws.rows_of(base, ws.rstd_k, ws.H, 1);
  }
  b.dbeta = ws.rows_of(base, ws.dbeta, ws.HV, 1);
  b.dg = ws.rows_of(base, ws.dg, ws.HV, 1);
  b.cu_seqlens = f.cu_seqlens;
  b.slot_items = slot_items;
  b.tokens = f.tokens;
  b.num_seqs = f.num_seqs;
  b.H = f.H;
  b.HV = f.HV;
  b.scale = f.scale;
  // 16-byte rows: the forward's flag covers q, k, v; bwd_dhu needs q, k, dout (its w and dv rows
  // are the workspace's, always aligned).
  const bool dout16 = gdn::rows_aligned(p.dout, varlen, 16);
  b.vec16 = f.vec16 && dout16;
  // Where bwd_dhu can work dv_local out itself (its value block of 64, TMA rows, its reverse chain
  // unsplit: BwdDhuTraits::kLocal), it does, from the rows it streams anyway: no dv_local kernel,
  // and none of its traffic (q, k, do read once more, dv written and read back; 218 us of 1.82 ms
  // at B4 T8192 H16, docs/perf/gdn_chunk_bwd.md). The op's l2norm then runs as a pass of its own
  // (l2norm_rows.cuh: qn, kn, rstd, the dv_local kernel's bits).
  const bool dhu_split = ws.dhu.split.count > 1 && !varlen;
  const bool dhu_local = b.vec16 && ws.dhu.bv == 64 && !dhu_split;
  if (dhu_local && l2norm && !ws.norms_kept)
    ATTNKIT_RETURN_IF_ERROR(gdn::launch_l2norm_rows(in, b.qn, b.kn, b.rstd_q, b.rstd_k, stream));
  if (!dhu_local) ATTNKIT_RETURN_IF_ERROR(cuda_status(gdn::launch_gdn_chunk_bwd<E, kD>(b, ws.slots, true, stream), "gdn_backward"));
  if (l2norm && !b.fold_norms) {  // from here on q, k are the normalised rows
    b.normalize = false;
    b.q = b.qn;
    b.k = b.kn;
  }

  // 3. bwd_dhu: dh per chunk slot, dv2, dh0 (with dhu_local, dv_local too).
  gdn::BwdDhuArgs d;
  d.q = b.q;
  d.k = b.k;
  d.w = f.w;
  d.dout = b.dout;
  d.local = dhu_local;
  if (!dhu_local) d.dv = b.dv_local;
  d.dv2 = b.dv2;
  if (b.fold_norms) {
    d.rstd_q = b.rstd_q;
    d.rstd_k = b.rstd_k;
  }
  if (in.g.defined()) {  // the WY kernel's gamma: cumulative, fused gate applied, log2 units
    d.gate = static_cast<const float*>(f.gamma.ptr);
    d.g_sb = varlen ? 0 : f.gamma.sb;
    d.g_st = f.gamma.st;
    d.g_sh = f.gamma.sh;
    d.gate_log2 = 1.f;
  }
  d.dht = gdn::state_tensor(p.dfinal_state, in.state_layout);
  d.dh = base + ws.dh;
  d.dh_sc = ws.HV * kD * kD;
  d.dh_sb = varlen ? 0 : ((ws.T + 63) / 64) * d.dh_sc;
  d.dh_sh = kD * kD;
  d.dh_sk = kD;
  d.dh_sv = 1;
  d.dh_vec16 = true;
  d.dh_chunks = static_cast<int>(varlen ? ws.slots : (ws.T + 63) / 64);
  d.dh_batch = varlen ? 1 : static_cast<int>(f.num_seqs);
  if (p.dinitial_state.defined()) {
    d.dh0 = static_cast<float*>(p.dinitial_state.data);
    d.dh0_sn = p.dinitial_state.strides[0];
    d.dh0_sh = p.dinitial_state.strides[1];
    gdn::state_strides(p.dinitial_state, in.state_layout, d.dh0_sk, d.dh0_sv);
  }
  d.cu_seqlens = f.cu_seqlens;
  if (varlen_seqs) d.chunk_offsets = first_slots;
  d.tokens = f.tokens;
  d.num_seqs = f.num_seqs;
  d.H = f.H;
  d.HV = f.HV;
  d.scale = f.scale;
  const bool qk16 = (l2norm && !b.fold_norms) || (gdn::rows_aligned(in.q, varlen, 16) && gdn::rows_aligned(in.k, varlen, 16));
  d.vec16 = qk16 && dout16;  // (the workspace's qn, kn are aligned)
  d.dv2_vec16 = true;
  if (ws.dhu.split.count > 1) {
    d.split.starts = reinterpret_cast<float*>(base + ws.dhu_starts);
    d.split.prods = reinterpret_cast<float*>(base + ws.dhu_prods);
  }
  ATTNKIT_RETURN_IF_ERROR(gdn::launch_bwd_dhu(d, in.q.dtype, kD, kD, ws.dhu, stream));

  // 4. The per-chunk gradients.
  ATTNKIT_RETURN_IF_ERROR(cuda_status(gdn::launch_gdn_chunk_bwd<E, kD>(b, ws.slots, false, stream), "gdn_backward"));

  // 5. Into the op's gradients.
  gdn::BwdFinishArgs e;
  if (l2norm) {
    e.raw_rows = b.fold_norms;
    e.qn = b.fold_norms ? b.q : b.qn;
    e.kn = b.fold_norms ? b.k : b.kn;
    e.rstd_q = b.rstd_q;
    e.rstd_k = b.rstd_k;
  }
  e.dq_out = gdn::row_tensor(p.dq, varlen);
  e.dk_out = gdn::row_tensor(p.dk, varlen);
  e.dq = b.dq;
  e.dk = b.dk;
  e.dbeta = b.dbeta;
  e.dg = b.dg;
  e.beta = b.beta;
  e.g = token_tensor(in.g, varlen);
  auto token_out = [&](const TensorView& t) {
    return gdn::TokenOut{t.data, t.dtype, varlen ? 0 : t.strides[0], t.strides[1], t.strides[2]};
  };
  e.dbeta_out = token_out(p.dbeta);
  if (in.g.defined()) e.dg_out = token_out(p.dg);
  if (in.A_log.defined()) {
    e.A_log = f.A_log;
    e.dt_bias = f.dt_bias;
    e.a_stride = f.a_stride;
    e.dt_stride = f.dt_stride;
    e.dA_log = static_cast<float*>(p.dA_log.data);
    e.ddt_bias = static_cast<float*>(p.ddt_bias.data);
    e.da_stride = p.dA_log.strides[0];
    e.ddt_stride = p.ddt_bias.strides[0];
  }
  e.B = in.q.size(0);
  e.T = ws.T;
  e.H = static_cast<int>(ws.H);
  e.HV = static_cast<int>(ws.HV);
  e.K = kD;
  e.l2norm = in.use_qk_l2norm;
  e.beta_logit = in.beta_is_logit;
  return cuda_status(gdn::launch_gdn_bwd_finish<E, kD>(e, stream), "gdn_backward");
}

}  // namespace

size_t gdn_backward_workspace_size(const GdnBwdParams& p) { return BwdWorkspace(p).total; }

Status gdn_backward(const GdnBwdParams& caller) {
  GdnBwdParams p = caller;
  normalize_unit_strides(p.in.q, p.in.k, p.in.v, p.dout, p.dq, p.dk, p.dv);
  ATTNKIT_RETURN_IF_ERROR(check_supported(p));
  if (p.in.A_log.defined() && (p.dA_log.dtype != DType::kFloat32 || p.ddt_bias.dtype != DType::kFloat32))
    return Unsupported("dA_log: the CUDA chunked backward writes float32 dA_log and ddt_bias");
  const BwdWorkspace ws(p);
  if (reinterpret_cast<uintptr_t>(p.workspace.data) % 256 != 0)
    return InvalidArgument("workspace: the CUDA chunked backward needs a 256-byte aligned device pointer");
  // No tokens at all (T = 0) still runs: dh0 = dht and dA_log = ddt_bias = 0 are written.
  char* base = static_cast<char*>(p.workspace.data);
  auto stream = static_cast<cudaStream_t>(p.stream);
  const bool bf16 = p.in.q.dtype == DType::kBFloat16;
  if (ws.D == 128)
    return bf16 ? run_backward<cutlass::bfloat16_t, 128>(p, ws, base, stream) : run_backward<cutlass::half_t, 128>(p, ws, base, stream);
  return bf16 ? run_backward<cutlass::bfloat16_t, 64>(p, ws, base, stream) : run_backward<cutlass::half_t, 64>(p, ws, base, stream);
}

}  // namespace attnkit::cuda
