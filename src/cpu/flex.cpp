// src/cpu/flex.cpp — flex attention with the built-in catalog of mods on the CPU.
#include "attnkit/cpu/flex_cpu.hpp"
#include "attnkit/semantics/flex_catalog.hpp"
#include "src/cpu/backend.hpp"

namespace attnkit::cpu {
namespace {

// Picks the cheapest functor pair for the enabled catalog parts and calls run(score, mask).
template <class Run>
void with_catalog(const FlexMods& m, int64_t sk, Run&& run) {
  const CatalogScoreMod sm = catalog_score_mod(m, sk);
  if (!m.has_mask_mod()) {
    if (m.has_score_mod()) run(sm, NoMaskMod{});
    else run(IdentityScoreMod{}, NoMaskMod{});
    return;
  }
  const CatalogMaskMod mm = catalog_mask_mod(m);
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
