// attnkit/cpu/attention_core.hpp — the CPU reference for one (batch, query head): tiled online
// softmax forward and the matching backward. Shared by dense attention and flex attention.
//
// A Problem describes the scores and the sparsity of one head:
//   int64_t block_q() const, block_k() const      tile sizes of the block iteration
//   void for_each_kv_block(int64_t qb, F f) const calls f(kv_block, full) for each visited block
//   bool visible(int64_t i, int64_t j) const       mask of a partial block (skipped when full)
//   Acc  score(Acc s, int64_t i, int64_t j, Acc* ds) const
//        s = scale * q_i.k_j -> modified score; *ds = d(modified)/d(s)
// Forward keeps, per query row, the running max m (base 2), the sum l and the output accumulator;
// it never holds more than one block_k of scores (no full score matrix).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>
#include "attnkit/semantics/numerics.hpp"

namespace attnkit::cpu {

template <class Acc>
inline Acc dot(const Acc* a, const Acc* b, int64_t n) {
  Acc s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Q [sq, d], K [sk, d], V [sk, dv] -> O [sq, dv], lse [sq] (natural log, -inf for empty rows).
template <class Acc, class Problem>
void attention_head_forward(const Acc* Q, const Acc* K, const Acc* V, int64_t sq, int64_t sk, int64_t d,
                            int64_t dv, Acc scale, const Problem& pb, Acc* O, Acc* lse) {
  const Acc ninf = -std::numeric_limits<Acc>::infinity();
  const Acc log2e = static_cast<Acc>(kLog2e);
  const int64_t bq = pb.block_q(), bk = pb.block_k();
  std::vector<Acc> s2(static_cast<size_t>(bk));   // [bk] scores of one row and block, base-2 scaled
  std::vector<char> seen(static_cast<size_t>(bk));
  std::vector<Acc> m(static_cast<size_t>(bq)), l(static_cast<size_t>(bq));  // [bq] row stats
  for (int64_t qb = 0; qb * bq < sq; ++qb) {
    const int64_t i0 = qb * bq, i1 = std::min(sq, i0 + bq);
    std::fill(m.begin(), m.end(), ninf);
    std::fill(l.begin(), l.end(), Acc(0));
    for (int64_t i = i0; i < i1; ++i) std::fill(O + i * dv, O + (i + 1) * dv, Acc(0));
    pb.for_each_kv_block(qb, [&](int64_t kb, bool full) {
      const int64_t j0 = kb * bk, j1 = std::min(sk, j0 + bk);
      for (int64_t i = i0; i < i1; ++i) {
        Acc bmax = ninf;
        for (int64_t j = j0; j < j1; ++j) {
          const bool vis = full || pb.visible(i, j);
          seen[j - j0] = vis;
          if (!vis) continue;  // masked before exp: never touches the sums
          Acc ds;
          s2[j - j0] = pb.score(scale * dot(Q + i * d, K + j * d, d), i, j, &ds) * log2e;
          bmax = std::max(bmax, s2[j - j0]);
        }
        if (bmax == ninf) continue;
        Acc& mi = m[i - i0];
        const Acc mnew = std::max(mi, bmax);
        const Acc corr = std::exp2(mi - mnew);  // mi <= mnew; exp2(-inf) = 0 on the first block
        Acc* o = O + i * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] *= corr;
        Acc li = l[i - i0] * corr;
        for (int64_t j = j0; j < j1; ++j) {
          if (!seen[j - j0]) continue;
          const Acc p = std::exp2(s2[j - j0] - mnew);
          li += p;
          const Acc* vj = V + j * dv;
          for (int64_t c = 0; c < dv; ++c) o[c] += p * vj[c];
        }
        l[i - i0] = li;
        mi = mnew;
      }
    });
    for (int64_t i = i0; i < i1; ++i) {
      const Acc li = l[i - i0];
      Acc* o = O + i * dv;
      if (li == Acc(0)) {  // no visible key: out 0, LSE -inf
        std::fill(o, o + dv, Acc(0));
        lse[i] = ninf;
        continue;
      }
      for (int64_t c = 0; c < dv; ++c) o[c] /= li;
      lse[i] = (m[i - i0] + std::log2(li)) * static_cast<Acc>(kLn2);
    }
  }
}

// Backward of one head. dO [sq, dv], lse [sq], delta [sq] = rowsum(dO * O).
// dQ [sq, d] is written; dK [sk, d], dV [sk, dv] are accumulated into (+=).
template <class Acc, class Problem>
void attention_head_backward(const Acc* Q, const Acc* K, const Acc* V, const Acc* dO, const Acc* lse,
                             const Acc* delta, int64_t sq, int64_t sk, int64_t d, int64_t dv, Acc scale,
                             const Problem& pb, Acc* dQ, Acc* dK, Acc* dV) {
  const Acc log2e = static_cast<Acc>(kLog2e);
  const int64_t bq = pb.block_q(), bk = pb.block_k();
  std::fill(dQ, dQ + sq * d, Acc(0));
  for (int64_t qb = 0; qb * bq < sq; ++qb) {
    const int64_t i0 = qb * bq, i1 = std::min(sq, i0 + bq);
    pb.for_each_kv_block(qb, [&](int64_t kb, bool full) {
      const int64_t j0 = kb * bk, j1 = std::min(sk, j0 + bk);
      for (int64_t i = i0; i < i1; ++i) {
        if (std::isinf(lse[i])) continue;  // empty row: zero gradients
        const Acc lse2 = lse[i] * log2e;
        const Acc* qi = Q + i * d;
        const Acc* doi = dO + i * dv;
        Acc* dqi = dQ + i * d;
        for (int64_t j = j0; j < j1; ++j) {
          if (!full && !pb.visible(i, j)) continue;
          Acc dmod;
          const Acc s = pb.score(scale * dot(qi, K + j * d, d), i, j, &dmod);
          const Acc p = std::exp2(s * log2e - lse2);
          Acc* dvj = dV + j * dv;
          for (int64_t c = 0; c < dv; ++c) dvj[c] += p * doi[c];
          const Acc dp = dot(doi, V + j * dv, dv);
          const Acc ds = p * (dp - delta[i]) * dmod * scale;  // d loss / d (q_i . k_j)
          const Acc* kj = K + j * d;
          Acc* dkj = dK + j * d;
          for (int64_t c = 0; c < d; ++c) {
            dqi[c] += ds * kj[c];
            dkj[c] += ds * qi[c];
          }
        }
      }
    });
  }
}

}  // namespace attnkit::cpu
