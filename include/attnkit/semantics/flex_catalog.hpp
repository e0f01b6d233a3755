// attnkit/semantics/flex_catalog.hpp — FlexMods (the op's runtime description of the built-in
// catalog) -> the catalog functors of flex_mods.hpp. One builder for the CPU backend and the CUDA
// kernels, so both read the tables with the same strides and broadcast rules.
#pragma once
#include <cstdint>
#include "attnkit/flex.hpp"
#include "attnkit/semantics/flex_mods.hpp"

namespace attnkit {

inline CatalogScoreMod catalog_score_mod(const FlexMods& m, int64_t sk) {
  CatalogScoreMod s;
  if (m.rel_bias.defined()) {
    s.rel_bias.table = static_cast<const float*>(m.rel_bias.data);
    s.rel_bias.head_stride = m.rel_bias.size(0) == 1 ? 0 : m.rel_bias.stride(0);
    s.rel_bias.stride = m.rel_bias.stride(1);
    s.rel_bias.sk = sk;
  }
  if (m.alibi_slopes.defined()) {
    s.alibi.slopes = static_cast<const float*>(m.alibi_slopes.data);
    s.alibi.stride = m.alibi_slopes.stride(0);
  }
  s.softcap = SoftcapScoreMod(static_cast<float>(m.softcap));
  return s;
}

inline CatalogMaskMod catalog_mask_mod(const FlexMods& m) {
  CatalogMaskMod k;
  k.causal = m.causal;
  if (m.prefix_lengths.defined()) {
    k.prefix.prefix_lengths = static_cast<const int32_t*>(m.prefix_lengths.data);
    k.prefix.stride = m.prefix_lengths.stride(0);
  }
  k.window.window = m.sliding_window;
  if (m.document_ids_q.defined()) {
    k.document.doc_q = static_cast<const int32_t*>(m.document_ids_q.data);
    k.document.doc_kv = static_cast<const int32_t*>(m.document_ids_kv.data);
    k.document.q_strides[0] = m.document_ids_q.stride(0);
    k.document.q_strides[1] = m.document_ids_q.stride(1);
    k.document.kv_strides[0] = m.document_ids_kv.stride(0);
    k.document.kv_strides[1] = m.document_ids_kv.stride(1);
  }
  return k;
}

}  // namespace attnkit
