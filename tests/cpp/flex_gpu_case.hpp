// tests/cpp/flex_gpu_case.hpp — one flex GPU test case (shape, mods, BlockMask), its mod tables
// and BlockMask on the host and the device; shared by the forward and backward GPU suites.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/semantics/flex_catalog.hpp"
#include "flex_block_mask.hpp"
#include "gpu_util.hpp"

namespace attnkit::test {

struct FlexGpuCase {
  int64_t B = 2, Hq = 4, Hkv = 2, Sq = 300, Sk = 300, D = 128;
  DType dt = DType::kBFloat16;
  bool causal = false, prefix = false, document = false, alibi = false, rel_bias = false;
  int64_t window = -1;
  double softcap = 0;
  std::optional<double> scale;  // unset: 1/sqrt(D)
  int block_mask = 1;  // 0: none, 1: per (b, h) lists, 2: broadcast over B and H
  bool full_blocks = true;
  int64_t block_k = 128;
  MaskFn block_pattern;  // set: the BlockMask lists this pattern instead of the catalog mask
  int num_splits = 0;    // the GPU run's FlexFwdParams::num_splits (short queries: split-KV)
  bool odd_unit_strides = false;  // the GPU run's size-1 dims carry strides of 3 elements (never stepped)
  std::string name() const {
    return "B" + std::to_string(B) + " Hq" + std::to_string(Hq) + " Hkv" + std::to_string(Hkv) + " Sq" + std::to_string(Sq) +
           " Sk" + std::to_string(Sk) + " D" + std::to_string(D) + (dt == DType::kFloat16 ? " fp16" : " bf16") +
           (causal ? " causal" : "") + (prefix ? " prefix" : "") + (document ? " doc" : "") + (alibi ? " alibi" : "") +
           (rel_bias ? " rel_bias" : "") + (window >= 0 ? " window" + std::to_string(window) : "") +
           (softcap > 0 ? " softcap" : "") +
           (scale ? " scale" + std::to_string(*scale) : "") + " blockmask" + std::to_string(block_mask) + (full_blocks ? "+full" : "") +
           " bk" + std::to_string(block_k) + " splits" + std::to_string(num_splits) + (odd_unit_strides ? " odd-unit-strides" : "");
  }
};

// The mod tables of a case, on the host (CPU runs) or copied to the device (GPU run).
struct ModTables {
  HostTensor alibi, rel_bias, prefix, doc_q, doc_kv;
};

inline ModTables make_tables(const FlexGpuCase& c, std::mt19937& rng) {
  ModTables t{HostTensor(DType::kFloat32, {c.Hq}), HostTensor(DType::kFloat32, {c.Hq, 2 * c.Sk - 1}),
              HostTensor(DType::kInt32, {c.B}), HostTensor(DType::kInt32, {c.B, c.Sq}), HostTensor(DType::kInt32, {c.B, c.Sk})};
  for (int64_t h = 0; h < c.Hq; ++h) t.alibi.set(h, -std::pow(2.0, -8.0 * (h + 1) / c.Hq));
  t.rel_bias.randn(rng);
  for (int64_t b = 0; b < c.B; ++b) t.prefix.set(b, static_cast<double>((b * 37 + 11) % std::max<int64_t>(c.Sk, 1)));
  // Documents: the same boundaries in query and key positions (scaled when Sq != Sk).
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t i = 0; i < c.Sq; ++i) t.doc_q.set(b * c.Sq + i, static_cast<double>((i * 5 / std::max<int64_t>(c.Sq, 1) + b) % 7));
    for (int64_t j = 0; j < c.Sk; ++j) t.doc_kv.set(b * c.Sk + j, static_cast<double>((j * 5 / std::max<int64_t>(c.Sk, 1) + b) % 7));
  }
  return t;
}

inline FlexMods mods_of(const FlexGpuCase& c, const TensorView& alibi, const TensorView& rel_bias, const TensorView& prefix,
                        const TensorView& doc_q, const TensorView& doc_kv) {
  FlexMods m;
  m.causal = c.causal;
  m.sliding_window = c.window;
  m.softcap = c.softcap;
  if (c.alibi) m.alibi_slopes = alibi;
  if (c.rel_bias) m.rel_bias = rel_bias;
  if (c.prefix) m.prefix_lengths = prefix;
  if (c.document) {
    m.document_ids_q = doc_q;
    m.document_ids_kv = doc_kv;
  }
  return m;
}

inline FlexMods mods_of(const FlexGpuCase& c, const ModTables& t) {
  return mods_of(c, t.alibi.view, t.rel_bias.view, t.prefix.view, t.doc_q.view, t.doc_kv.view);
}

// No mods, no BlockMask: each head dim at awkward lengths.
inline std::vector<FlexGpuCase> no_mod_cases() {
  std::vector<FlexGpuCase> cases;
  for (int64_t D : {64, 128, 256})
    for (auto [sq, sk] : {std::pair{1, 17}, std::pair{63, 65}, std::pair{127, 1000}, std::pair{300, 129}}) {
      FlexGpuCase c;
      c.D = D;
      c.Sq = sq;
      c.Sk = sk;
      c.block_mask = 0;
      cases.push_back(c);
    }
  return cases;
}

// Every catalog mod, with per-(b, h), broadcast and no BlockMasks, lengths off the tile grid.
inline std::vector<FlexGpuCase> catalog_cases() {
  auto base = [] {
    FlexGpuCase c;
    c.Sq = 333;
    c.Sk = 400;
    return c;
  };
  std::vector<FlexGpuCase> cases;
  FlexGpuCase c = base();
  c.causal = true;
  cases.push_back(c);
  c.full_blocks = false;  // every visited block partial
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.window = 100;  // sliding window
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.prefix = true;  // prefix-LM
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.document = true;  // document masking
  cases.push_back(c);
  c = base();
  c.document = true;
  c.block_mask = 0;  // no BlockMask: mask_mod everywhere
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.alibi = true;
  cases.push_back(c);
  c = base();
  c.causal = true;
  c.softcap = 20;
  cases.push_back(c);
  c = base();
  c.rel_bias = true;  // needs Sq <= Sk
  c.softcap = 5;
  c.alibi = true;
  c.block_mask = 2;  // broadcast over B and H
  cases.push_back(c);
  return cases;
}

// Scales <= 0 (the spec allows any finite scale): with -3 a row's scaled scores span more than 2^7
// in exp2's units, 0 gives uniform attention. No score mod (the scale folds into the exponent
// unless <= 0) with and without a BlockMask, ALiBi and a softcap alone (scaled before the mod),
// and the short-query split path.
inline std::vector<FlexGpuCase> nonpositive_scale_cases() {
  std::vector<FlexGpuCase> cases;
  for (int64_t D : {64, 128, 256}) {
    FlexGpuCase c;
    c.D = D;
    c.Sq = 200;
    c.Sk = 333;
    c.scale = -3.0;
    c.causal = true;  // BlockMask with partial and full blocks
    cases.push_back(c);
  }
  FlexGpuCase c;
  c.scale = -3.0;
  c.block_mask = 0;  // no mods, no BlockMask
  cases.push_back(c);
  c = FlexGpuCase{};
  c.scale = 0.0;
  c.causal = true;
  c.document = true;
  cases.push_back(c);
  c = FlexGpuCase{};
  c.scale = -2.0;
  c.causal = true;
  c.alibi = true;
  cases.push_back(c);
  c = FlexGpuCase{};
  c.scale = -0.5;
  c.causal = true;
  c.softcap = 5;
  cases.push_back(c);
  return cases;
}

// GQA ratios 1/4/8 (causal), then 256-wide key blocks (two key tiles each at D128, four at D256)
// and 128-wide ones at D256, with documents.
inline std::vector<FlexGpuCase> gqa_and_block_width_cases() {
  std::vector<FlexGpuCase> cases;
  for (int64_t ratio : {1, 4, 8}) {
    FlexGpuCase c;
    c.Hkv = 2;
    c.Hq = 2 * ratio;
    c.causal = true;
    cases.push_back(c);
  }
  FlexGpuCase w;
  w.Sk = 700;
  w.block_k = 256;
  w.causal = true;
  w.document = true;
  cases.push_back(w);
  w.D = 256;
  cases.push_back(w);
  w.block_k = 128;
  cases.push_back(w);
  return cases;
}

// Unlisted blocks are skipped and full blocks skip mask_mod: each head lists only the key blocks
// (kb + h) even, all as full, while mods.causal is on — causal must not be applied to them.
inline FlexGpuCase sparse_pattern_case() {
  FlexGpuCase c;
  c.Sq = c.Sk = 512;
  c.causal = true;
  c.block_pattern = [](int64_t, int64_t h, int64_t, int64_t j) { return ((j / 128) + h) % 2 == 0; };
  return c;
}

// The mod tables copied to the device, and the case's mods over them.
struct DeviceModTables {
  DeviceTensor alibi, rel_bias, prefix, doc_q, doc_kv;
  explicit DeviceModTables(const ModTables& t)
      : alibi(t.alibi), rel_bias(t.rel_bias), prefix(t.prefix), doc_q(t.doc_q), doc_kv(t.doc_kv) {}
  FlexMods mods(const FlexGpuCase& c) const { return mods_of(c, alibi.view, rel_bias.view, prefix.view, doc_q.view, doc_kv.view); }
};

// The case's BlockMask (null without one), from the catalog's own mask functor on the host
// tables, or from c.block_pattern.
inline std::unique_ptr<HostBlockMask> block_mask_of(const FlexGpuCase& c, const FlexMods& host_mods) {
  if (!c.block_mask) return nullptr;
  const CatalogMaskMod mask = catalog_mask_mod(host_mods);
  const MaskFn fn = c.block_pattern ? c.block_pattern : MaskFn([mask](int64_t b, int64_t h, int64_t i, int64_t j) { return mask(b, h, i, j); });
  return std::make_unique<HostBlockMask>(build_block_mask(c.Sq, c.Sk, 128, c.block_k, c.block_mask == 1 ? c.B : 1,
                                                          c.block_mask == 1 ? c.Hq : 1, fn, c.full_blocks));
}

// Device copies of a HostBlockMask's lists.
struct DeviceBlockMask {
  const HostBlockMask& host;
  DeviceTensor num, idx, full_num, full_idx;
  explicit DeviceBlockMask(const HostBlockMask& h)
      : host(h), num(h.kv_num), idx(h.kv_idx), full_num(h.full_num), full_idx(h.full_idx) {}
  BlockMaskView view() const {
    BlockMaskView v = host.view();
    v.kv_num_blocks = num.view;
    v.kv_indices = idx.view;
    if (host.use_full) {
      v.full_kv_num_blocks = full_num.view;
      v.full_kv_indices = full_idx.view;
    }
    return v;
  }
};

}  // namespace attnkit::test
