// src/cpu/attention.cpp — dense and varlen softmax attention on the CPU (the reference backend).
// The mask is spec/attention.md's, through the shared MaskRule; the math is attention_core.hpp.
#include <algorithm>
#include <cmath>

#include "attnkit/cpu/attention_driver.hpp"
#include "attnkit/semantics/mask.hpp"
#include "src/cpu/backend.hpp"

namespace attnkit::cpu {
namespace {

// Scores of softmax attention: scale * q.k, then softcap, visible where MaskRule says.
template <class Acc>
struct DenseProblem {
  MaskRule rule;
  Acc softcap = 0;
  int64_t sq = 0;
  static constexpr int64_t kBlock = 64;

  int64_t block_q() const { return kBlock; }
  int64_t block_k() const { return kBlock; }
  bool visible(int64_t i, int64_t j) const { return rule.visible(i, j); }
  Acc score(Acc s, int64_t, int64_t, Acc* ds) const { return apply_softcap(s, softcap, ds); }

  // lo() and hi() grow with the row, so a query block sees keys in [lo(first), hi(last)], and a
  // key block is fully visible when the last row's lo and the first row's hi both cover it.
  template <class F>
  void for_each_kv_block(int64_t qb, F&& f) const {
    const int64_t i0 = qb * kBlock, i1 = std::min(sq, i0 + kBlock) - 1;
    const int64_t lo = std::max<int64_t>(rule.lo(i0), 0), hi = std::min(rule.hi(i1), rule.sk - 1);
    if (hi < lo) return;
    for (int64_t kb = lo / kBlock; kb <= hi / kBlock; ++kb) {
      const int64_t j0 = kb * kBlock, j1 = std::min(rule.sk, j0 + kBlock) - 1;
      f(kb, rule.lo(i1) <= j0 && rule.hi(i0) >= j1);
    }
  }
};

template <class Params>
AttentionTensors make_tensors(const Params& p) {
  AttentionTensors t;
  const bool varlen = p.cu_seqlens_q.defined();
  const TensorView* cq = varlen ? &p.cu_seqlens_q : nullptr;
  const TensorView* ck = varlen ? &p.cu_seqlens_k : nullptr;
  t.q = {p.q, cq};
  t.k = {p.k, ck};
  t.v = {p.v, ck};
  const int off = varlen ? 0 : 1;  // varlen tensors have no batch dim
  t.hq = p.q.size(1 + off);
  t.hkv = p.k.size(1 + off);
  t.d = p.q.size(-1);
  t.dv_dim = p.v.size(-1);
  if (varlen) {
    t.batch = p.cu_seqlens_q.size(0) - 1;
    for (int64_t b = 0; b < t.batch; ++b) {
      t.seqlen_q.push_back(load_index(p.cu_seqlens_q, b + 1) - load_index(p.cu_seqlens_q, b));
      t.seqlen_k.push_back(load_index(p.cu_seqlens_k, b + 1) - load_index(p.cu_seqlens_k, b));
    }
  } else {
    t.batch = p.q.size(0);
    t.seqlen_q.assign(static_cast<size_t>(t.batch), p.q.size(1));
    t.seqlen_k.assign(static_cast<size_t>(t.batch), p.k.size(1));
  }
  return t;
}

template <class Acc, class Params>
auto problem_factory(const Params& p) {
  const MaskOptions mask = p.mask;
  const Acc softcap = static_cast<Acc>(p.softcap);
  return [mask, softcap](int64_t, int64_t, int64_t sq, int64_t sk) {
    return DenseProblem<Acc>{MaskRule::make(mask, sq, sk), softcap, sq};
  };
}

template <class Params>
double resolved_scale(const Params& p) {
  return p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.q.size(-1)));
}

template <class Acc>
void forward(const AttentionFwdParams& p) {
  AttentionTensors t = make_tensors(p);
  t.out = {p.out, t.q.cu};
  if (p.lse.defined()) t.lse = {p.lse, t.q.cu};
  run_attention_forward<Acc>(t, static_cast<Acc>(resolved_scale(p)), problem_factory<Acc>(p));
}

template <class Acc>
void backward(const AttentionBwdParams& p) {
  AttentionTensors t = make_tensors(p);
  t.out = {p.out, t.q.cu};
  t.dout = {p.dout, t.q.cu};
  t.dq = {p.dq, t.q.cu};
  t.dk = {p.dk, t.k.cu};
  t.dv = {p.dv, t.k.cu};
  t.lse = {p.lse, t.q.cu};
  run_attention_backward<Acc>(t, static_cast<Acc>(resolved_scale(p)), p.gqa_reduction, p.deterministic,
                              problem_factory<Acc>(p));
}

}  // namespace

Status attention_forward(const AttentionFwdParams& p) {
  if (p.q.dtype == DType::kFloat64) forward<double>(p);
  else forward<float>(p);
  return Status::Ok();
}

Status attention_backward(const AttentionBwdParams& p) {
  if (p.q.dtype == DType::kFloat64) backward<double>(p);
  else backward<float>(p);
  return Status::Ok();
}

}  // namespace attnkit::cpu
