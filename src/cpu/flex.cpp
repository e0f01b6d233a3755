// src/cpu/flex.cpp — flex attention with the built-in catalog of mods on the CPU.
#include "attnkit/cpu/flex_cpu.hpp"
#include "src/cpu/backend.hpp"

namespace attnkit::cpu {
namespace {

CatalogScoreMod make_score_mod(const FlexMods& m, int64_t sk) {
  CatalogScoreMod s;
  if (m.rel_bias.defined()) {
    s.rel_bias = static_cast<const float*>(m.rel_bias.data);
    s.rel_bias_head_stride = m.rel_bias.size(0) == 1 ? 0 : m.rel_bias.stride(0);
    s.rel_bias_stride = m.rel_bias.stride(1);
    s.sk = sk;
  }
  if (m.alibi_slopes.defined()) {
    s.alibi_slopes = static_cast<const float*>(m.alibi_slopes.data);
    s.alibi_stride = m.alibi_slopes.stride(0);
  }
  s.softcap = static_cast<float>(m.softcap);
  return s;
}

CatalogMaskMod make_mask_mod(const FlexMods& m) {
  CatalogMaskMod k;
  k.causal = m.causal;
  if (m.prefix_lengths.defined()) {
    k.prefix_lengths = static_cast<const int32_t*>(m.prefix_lengths.data);
    k.prefix_stride = m.prefix_lengths.stride(0);
  }
  k.window = m.sliding_window;
  if (m.document_ids_q.defined()) {
    k.doc_q = static_cast<const int32_t*>(m.document_ids_q.data);
    k.doc_kv = static_cast<const int32_t*>(m.document_ids_kv.data);
    k.doc_q_strides[0] = m.document_ids_q.stride(0);
    k.doc_q_strides[1] = m.document_ids_q.stride(1);
    k.doc_kv_strides[0] = m.document_ids_kv.stride(0);
    k.doc_kv_strides[1] = m.document_ids_kv.stride(1);
  }
  return k;
}

// Picks the cheapest functor pair for the enabled catalog parts and calls run(score, mask).
template <class Run>
void with_catalog(const FlexMods& m, int64_t sk, Run&& run) {
  const CatalogScoreMod sm = make_score_mod(m, sk);
  if (!m.has_mask_mod()) {
    if (m.has_score_mod()) run(sm, NoMaskMod{});
    else run(IdentityScoreMod{}, NoMaskMod{});
    return;
  }
  const CatalogMaskMod mm = make_mask_mod(m);
  if (m.has_score_mod()) run(sm, mm);
  else run(IdentityScoreMod{}, mm);
}

}  // namespace

Status flex_forward(const FlexFwdParams& p) {
  with_catalog(p.mods, p.k.size(2), [&](const auto& sm, const auto& mm) { flex_forward_unchecked(p, sm, mm); });
  return Status::Ok();
}

Status flex_backward(const FlexBwdParams& p) {
  with_catalog(p.mods, p.k.size(2), [&](const auto& sm, const auto& mm) { flex_backward_unchecked(p, sm, mm); });
  return Status::Ok();
}

}  // namespace attnkit::cpu
