// src/cpu/gdn.cpp — the gated delta rule ops on the CPU: chunked (or recurrent) forward and
// backward over every (sequence, value head), GVA sums of dq/dk in a fixed order, the backward of
// the in-op preprocessing, and the recurrent decode on a state pool.
#include <cmath>
#include <vector>

#include "attnkit/cpu/parallel.hpp"
#include "src/cpu/backend.hpp"
#include "src/cpu/gdn_io.hpp"

namespace attnkit::cpu {
namespace {

GdnHeadSource source_of(const GdnInputs& in) {
  return {in.q, in.k, in.v, in.beta, in.g, in.gk, in.A_log, in.dt_bias, in.use_qk_l2norm, in.beta_is_logit};
}
double scale_of(const std::optional<double>& s, int64_t K) { return s ? *s : 1.0 / std::sqrt(static_cast<double>(K)); }

template <class Acc>
void forward(const GdnFwdParams& p) {
  const GdnInputs& in = p.in;
  const GdnLayout lay(in.q, in.v, in.cu_seqlens);
  const GdnHeadSource src = source_of(in);
  const Acc scale = static_cast<Acc>(scale_of(in.scale, lay.K));
  parallel_for(lay.num_seqs * lay.HV, [&](int64_t task) {
    const int64_t n = task / lay.HV, hv = task % lay.HV;
    GdnHead<Acc> x = load_gdn_head<Acc>(lay, src, n, hv);
    if (in.initial_state.defined()) gather(state_slice(in.initial_state, n, hv, in.state_layout), x.h0.data());
    std::vector<Acc> o(static_cast<size_t>(x.T * x.V)), ht(x.h0);  // [T, V], [K, V]
    if (in.algorithm == GdnAlgorithm::kRecurrent) gdn_recurrent_forward(x, scale, o.data(), ht.data());
    else gdn_chunk_forward(x, scale, o.data(), ht.data());
    scatter(lay.slice(p.out, n, hv), o.data());
    if (p.final_state.defined()) scatter(state_slice(p.final_state, n, hv, in.state_layout), ht.data());
  });
}

template <class Acc>
void backward(const GdnBwdParams& p) {
  const GdnInputs& in = p.in;
  const GdnLayout lay(in.q, in.v, in.cu_seqlens);
  const GdnHeadSource src = source_of(in);
  const Acc scale = static_cast<Acc>(scale_of(in.scale, lay.K));
  const int64_t N = lay.num_seqs, HV = lay.HV, H = lay.H, group = HV / H;
  // dq, dk of every value head before the GVA sum, and per-(n, hv) partial sums of the fused
  // gate's parameter gradients; all reduced afterwards in a fixed order (deterministic).
  std::vector<std::vector<Acc>> dq_hv(static_cast<size_t>(N * HV)), dk_hv(static_cast<size_t>(N * HV));
  std::vector<Acc> dA_part(static_cast<size_t>(N * HV), Acc(0)), dbias_part(static_cast<size_t>(N * HV), Acc(0));
  parallel_for(N * HV, [&](int64_t task) {
    const int64_t n = task / HV, hv = task % HV;
    std::vector<Acc> raw_g, raw_beta;
    GdnHead<Acc> x = load_gdn_head<Acc>(lay, src, n, hv, &raw_g, &raw_beta);
    if (in.initial_state.defined()) gather(state_slice(in.initial_state, n, hv, in.state_layout), x.h0.data());
    const std::vector<Acc> dO = gather<Acc>(lay.slice(p.dout, n, hv));  // [T, V]
    std::vector<Acc> dht;
    if (p.dfinal_state.defined()) {
      dht.resize(static_cast<size_t>(x.K * x.V));
      gather(state_slice(p.dfinal_state, n, hv, in.state_layout), dht.data());
    }
    const Acc* dht_ptr = dht.empty() ? nullptr : dht.data();
    GdnHeadGrad<Acc> g = (in.algorithm == GdnAlgorithm::kRecurrent || x.gdim != 1)
                             ? gdn_recurrent_backward(x, scale, dO.data(), dht_ptr)
                             : gdn_chunk_backward(x, scale, dO.data(), dht_ptr);
    if (in.beta_is_logit)
      for (int64_t t = 0; t < x.T; ++t) {
        const Acc s = sigmoid(raw_beta[t]);
        g.dbeta[t] *= s * (Acc(1) - s);
      }
    if (in.A_log.defined()) {  // g = a * softplus(raw + bias), a = -exp(A_log)
      const Acc a = -std::exp(load<Acc>(in.A_log.data, in.A_log.dtype, hv * in.A_log.stride(0)));
      const Acc bias = load<Acc>(in.dt_bias.data, in.dt_bias.dtype, hv * in.dt_bias.stride(0));
      for (int64_t t = 0; t < x.T; ++t) {
        dA_part[task] += g.dg[t] * x.g[t];  // d g / d A_log = g
        g.dg[t] *= a * sigmoid(raw_g[t] + bias);
        dbias_part[task] += g.dg[t];
      }
    }
    scatter(lay.slice(p.dv, n, hv), g.dv.data());
    scatter(lay.slice(p.dbeta, n, hv), g.dbeta.data());
    if (p.dg.defined()) scatter(lay.slice(p.dg, n, hv), g.dg.data());
    if (p.dinitial_state.defined()) scatter(state_slice(p.dinitial_state, n, hv, in.state_layout), g.dh0.data());
    dq_hv[task] = std::move(g.dq);
    dk_hv[task] = std::move(g.dk);
  });
  // GVA: sum the value heads of each q/k head in ascending order, then the l2norm backward.
  parallel_for(N * H, [&](int64_t task) {
    const int64_t n = task / H, h = task % H, T = lay.seq_len(n);
    std::vector<Acc> dq(static_cast<size_t>(T * lay.K), Acc(0)), dk(dq);
    for (int64_t r = 0; r < group; ++r) {
      const auto& a = dq_hv[n * HV + h * group + r];
      const auto& b = dk_hv[n * HV + h * group + r];
      for (size_t i = 0; i < dq.size(); ++i) {
        dq[i] += a[i];
        dk[i] += b[i];
      }
    }
    if (in.use_qk_l2norm) {
      std::vector<Acc> q = gather<Acc>(lay.slice(in.q, n, h)), k = gather<Acc>(lay.slice(in.k, n, h)), qn, kn;
      l2norm_rows(q, lay.K, &qn);
      l2norm_rows(k, lay.K, &kn);
      l2norm_rows_backward(q, qn, lay.K, dq);
      l2norm_rows_backward(k, kn, lay.K, dk);
    }
    scatter(lay.slice(p.dq, n, h), dq.data());
    scatter(lay.slice(p.dk, n, h), dk.data());
  });
  if (in.A_log.defined()) {
    for (int64_t hv = 0; hv < HV; ++hv) {
      Acc sa = 0, sb = 0;
      for (int64_t n = 0; n < N; ++n) {
        sa += dA_part[n * HV + hv];
        sb += dbias_part[n * HV + hv];
      }
      if (p.dA_log.defined()) store<Acc>(p.dA_log.data, p.dA_log.dtype, hv * p.dA_log.stride(0), sa);
      if (p.ddt_bias.defined()) store<Acc>(p.ddt_bias.data, p.ddt_bias.dtype, hv * p.ddt_bias.stride(0), sb);
    }
  }
}

template <class Acc>
void decode(const GdnDecodeParams& p) {
  const GdnLayout lay(p.q, p.v, p.cu_seqlens);
  const GdnHeadSource src{p.q, p.k, p.v, p.beta, p.g, p.gk, p.A_log, p.dt_bias, p.use_qk_l2norm, p.beta_is_logit};
  const Acc scale = static_cast<Acc>(scale_of(p.scale, lay.K));
  parallel_for(lay.num_seqs * lay.HV, [&](int64_t task) {
    const int64_t n = task / lay.HV, hv = task % lay.HV;
    const int64_t slot = p.state_indices.defined() ? load_index(p.state_indices, n) : n;
    const Slice2D out = lay.slice(p.out, n, hv);
    std::vector<Acc> o(static_cast<size_t>(out.rows * out.cols), Acc(0));  // [T, V]
    if (slot >= 0) {  // a negative slot is padding: output 0, no state touched
      GdnHead<Acc> x = load_gdn_head<Acc>(lay, src, n, hv);
      const Slice2D st = state_slice(p.state, slot, hv, p.state_layout);
      gather(st, x.h0.data());
      std::vector<Acc> h(x.h0);
      gdn_recurrent_forward(x, scale, o.data(), h.data());
      scatter(st, h.data());
    }
    scatter(out, o.data());
  });
}

}  // namespace

Status gdn_forward(const GdnFwdParams& p) {
  if (p.in.q.dtype == DType::kFloat64) forward<double>(p);
  else forward<float>(p);
  return Status::Ok();
}
Status gdn_backward(const GdnBwdParams& p) {
  if (p.in.q.dtype == DType::kFloat64) backward<double>(p);
  else backward<float>(p);
  return Status::Ok();
}
Status gdn_decode(const GdnDecodeParams& p) {
  if (p.q.dtype == DType::kFloat64) decode<double>(p);
  else decode<float>(p);
  return Status::Ok();
}

}  // namespace attnkit::cpu
