// attnkit/cpu/attention_driver.hpp — runs attention_core over every (batch, query head) of a
// problem on the CPU threads, and reduces dK/dV over GQA groups with either strategy.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>
#include "attnkit/attention.hpp"
#include "attnkit/cpu/attention_core.hpp"
#include "attnkit/cpu/io.hpp"
#include "attnkit/cpu/parallel.hpp"
#include "attnkit/semantics/heads.hpp"

namespace attnkit::cpu {

// Where every tensor of one attention call lives, and the per-batch sequence lengths.
struct AttentionTensors {
  SeqTensor q, k, v, out, dout, dq, dk, dv;
  RowTensor lse;  // lse.t absent => not written (forward)
  int64_t batch = 0, hq = 0, hkv = 0, d = 0, dv_dim = 0;
  std::vector<int64_t> seqlen_q, seqlen_k;  // [batch]
};

// make_problem(b, h, sq, sk) returns the Problem (see attention_core.hpp) of one head.
template <class Acc, class MakeProblem>
void run_attention_forward(const AttentionTensors& t, Acc scale, const MakeProblem& make_problem) {
  parallel_for(t.batch * t.hq, [&](int64_t task) {
    const int64_t b = task / t.hq, h = task % t.hq, hk = kv_head_of(h, t.hq, t.hkv);
    const int64_t sq = t.seqlen_q[b], sk = t.seqlen_k[b];
    if (sq == 0) return;
    std::vector<Acc> Q = gather<Acc>(t.q.slice(b, h, sq));   // [sq, d]
    std::vector<Acc> K = gather<Acc>(t.k.slice(b, hk, sk));  // [sk, d]
    std::vector<Acc> V = gather<Acc>(t.v.slice(b, hk, sk));  // [sk, dv]
    std::vector<Acc> O(static_cast<size_t>(sq * t.dv_dim));   // [sq, dv]
    std::vector<Acc> lse(static_cast<size_t>(sq));            // [sq]
    attention_head_forward<Acc>(Q.data(), K.data(), V.data(), sq, sk, t.d, t.dv_dim, scale,
                                make_problem(b, h, sq, sk), O.data(), lse.data());
    scatter(t.out.slice(b, h, sq), O.data());
    if (t.lse.t.defined()) scatter(t.lse.slice(b, h, sq), lse.data());
  });
}

// dK/dV accumulators of one (batch, kv head) or (batch, query head) slot.
template <class Acc>
struct KvGrad {
  std::vector<Acc> dk, dv;  // [sk, d], [sk, dv]
  std::mutex lock;
};

template <class Acc, class MakeProblem>
void run_attention_backward(const AttentionTensors& t, Acc scale, GqaReduction reduction, bool deterministic,
                            const MakeProblem& make_problem) {
  // deterministic => the fixed-order (split) reduction, as kPacked's head order; atomic adds land
  // in thread order.
  const bool split = reduction == GqaReduction::kSplit || reduction == GqaReduction::kPacked || deterministic;
  const int64_t slots = t.batch * (split ? t.hq : t.hkv);
  std::vector<std::unique_ptr<KvGrad<Acc>>> grads(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t sk = t.seqlen_k[s / (split ? t.hq : t.hkv)];
    grads[s] = std::make_unique<KvGrad<Acc>>();
    grads[s]->dk.assign(static_cast<size_t>(sk * t.d), Acc(0));
    grads[s]->dv.assign(static_cast<size_t>(sk * t.dv_dim), Acc(0));
  }
  parallel_for(t.batch * t.hq, [&](int64_t task) {
    const int64_t b = task / t.hq, h = task % t.hq, hk = kv_head_of(h, t.hq, t.hkv);
    const int64_t sq = t.seqlen_q[b], sk = t.seqlen_k[b];
    if (sq == 0) return;
    std::vector<Acc> Q = gather<Acc>(t.q.slice(b, h, sq));     // [sq, d]
    std::vector<Acc> K = gather<Acc>(t.k.slice(b, hk, sk));    // [sk, d]
    std::vector<Acc> V = gather<Acc>(t.v.slice(b, hk, sk));    // [sk, dv]
    std::vector<Acc> O = gather<Acc>(t.out.slice(b, h, sq));   // [sq, dv]
    std::vector<Acc> dO = gather<Acc>(t.dout.slice(b, h, sq)); // [sq, dv]
    std::vector<Acc> lse = gather<Acc>(t.lse.slice(b, h, sq)); // [sq]
    std::vector<Acc> delta(static_cast<size_t>(sq));           // [sq] rowsum(dO * O)
    for (int64_t i = 0; i < sq; ++i) delta[i] = dot(dO.data() + i * t.dv_dim, O.data() + i * t.dv_dim, t.dv_dim);
    std::vector<Acc> dQ(static_cast<size_t>(sq * t.d));        // [sq, d]
    std::vector<Acc> dK(static_cast<size_t>(sk * t.d), Acc(0)), dV(static_cast<size_t>(sk * t.dv_dim), Acc(0));
    attention_head_backward<Acc>(Q.data(), K.data(), V.data(), dO.data(), lse.data(), delta.data(), sq, sk, t.d,
                                 t.dv_dim, scale, make_problem(b, h, sq, sk), dQ.data(), dK.data(), dV.data());
    scatter(t.dq.slice(b, h, sq), dQ.data());
    KvGrad<Acc>& g = *grads[b * (split ? t.hq : t.hkv) + (split ? h : hk)];
    std::lock_guard<std::mutex> guard(g.lock);  // uncontended in split mode
    for (size_t i = 0; i < dK.size(); ++i) g.dk[i] += dK[i];
    for (size_t i = 0; i < dV.size(); ++i) g.dv[i] += dV[i];
  });
  // Cast out; the split strategy sums the query heads of each group in ascending order.
  const int64_t group = t.hq / t.hkv;
  parallel_for(t.batch * t.hkv, [&](int64_t task) {
    const int64_t b = task / t.hkv, hk = task % t.hkv, sk = t.seqlen_k[b];
    if (sk == 0) return;
    std::vector<Acc> dK, dV;
    if (!split) {
      dK = std::move(grads[task]->dk);
      dV = std::move(grads[task]->dv);
    } else {
      dK.assign(static_cast<size_t>(sk * t.d), Acc(0));
      dV.assign(static_cast<size_t>(sk * t.dv_dim), Acc(0));
      for (int64_t r = 0; r < group; ++r) {
        const KvGrad<Acc>& g = *grads[b * t.hq + hk * group + r];
        for (size_t i = 0; i < dK.size(); ++i) dK[i] += g.dk[i];
        for (size_t i = 0; i < dV.size(); ++i) dV[i] += g.dv[i];
      }
    }
    scatter(t.dk.slice(b, hk, sk), dK.data());
    scatter(t.dv.slice(b, hk, sk), dV.data());
  });
}

}  // namespace attnkit::cpu
