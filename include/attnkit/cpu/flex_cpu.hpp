// attnkit/cpu/flex_cpu.hpp — flex attention on the CPU with your own score_mod / mask_mod.
//
//   struct MyBias { const float* table;
//     template <class T> T operator()(T s, int64_t b, int64_t h, int64_t q, int64_t kv, T* ds) const {
//       *ds = T(1); return s + table[q - kv + 1024]; } };
//   attnkit::FlexFwdParams p = ...;               // q/k/v/out views, optional block_mask
//   attnkit::Status st = attnkit::cpu::flex_forward_with_mods(p, MyBias{tbl}, attnkit::NoMaskMod{});
//
// The functor contract is in attnkit/semantics/flex_mods.hpp; p.mods (the catalog) is ignored
// here. The BlockMask, when given, decides which blocks are visited; mask_mod is evaluated on
// partial blocks only.
#pragma once
#include <cmath>
#include "attnkit/cpu/attention_driver.hpp"
#include "attnkit/flex.hpp"
#include "attnkit/semantics/flex_mods.hpp"
#include "attnkit/validate.hpp"

namespace attnkit::cpu {

template <class Acc, class ScoreMod, class MaskMod>
struct FlexProblem {
  const ScoreMod* score_mod;
  const MaskMod* mask_mod;
  const BlockMaskView* bm;  // nullptr: visit every block
  int64_t b, h, sk;

  int64_t block_q() const { return bm ? bm->block_q : 128; }
  int64_t block_k() const { return bm ? bm->block_k : 128; }
  bool visible(int64_t i, int64_t j) const { return (*mask_mod)(b, h, i, j); }
  Acc score(Acc s, int64_t i, int64_t j, Acc* ds) const { return (*score_mod)(s, b, h, i, j, ds); }

  template <class F>
  void for_each_kv_block(int64_t qb, F&& f) const {
    if (!bm) {
      for (int64_t kb = 0; kb * block_k() < sk; ++kb) f(kb, is_no_mask_v<MaskMod>);
      return;
    }
    visit(bm->kv_num_blocks, bm->kv_indices, qb, false, f);
    if (bm->full_kv_num_blocks.defined()) visit(bm->full_kv_num_blocks, bm->full_kv_indices, qb, true, f);
  }

 private:
  template <class F>
  void visit(const TensorView& num, const TensorView& idx, int64_t qb, bool full, F&& f) const {
    const int64_t bb = num.sizes[0] == 1 ? 0 : b, hh = num.sizes[1] == 1 ? 0 : h;
    const int64_t n = load_index_at(num, {bb, hh, qb});
    for (int64_t t = 0; t < n; ++t) f(load_index_at(idx, {bb, hh, qb, t}), full || is_no_mask_v<MaskMod>);
  }
  static int64_t load_index_at(const TensorView& t, std::initializer_list<int64_t> at) {
    int64_t off = 0, d = 0;
    for (int64_t i : at) off += i * t.strides[d++];
    return static_cast<const int32_t*>(t.data)[off];
  }
};

template <class Params>
AttentionTensors flex_tensors(const Params& p) {
  AttentionTensors t;
  // [B, H, S, D]: batch dim 0, sequence dim 2, head dim 1.
  t.q = {p.q, nullptr, 0, 2, 1};
  t.k = {p.k, nullptr, 0, 2, 1};
  t.v = {p.v, nullptr, 0, 2, 1};
  t.out = {p.out, nullptr, 0, 2, 1};
  if (p.lse.defined()) t.lse = {p.lse, nullptr};
  t.batch = p.q.size(0);
  t.hq = p.q.size(1);
  t.hkv = p.k.size(1);
  t.d = p.q.size(3);
  t.dv_dim = p.v.size(3);
  t.seqlen_q.assign(static_cast<size_t>(t.batch), p.q.size(2));
  t.seqlen_k.assign(static_cast<size_t>(t.batch), p.k.size(2));
  return t;
}

template <class Acc, class ScoreMod, class MaskMod>
auto flex_problem_factory(const BlockMaskView& bm, const ScoreMod& sm, const MaskMod& mm) {
  const BlockMaskView* bmp = bm.defined() ? &bm : nullptr;
  return [=, &sm, &mm](int64_t b, int64_t h, int64_t, int64_t sk) {
    return FlexProblem<Acc, ScoreMod, MaskMod>{&sm, &mm, bmp, b, h, sk};
  };
}

template <class Params>
double flex_scale(const Params& p) {
  return p.scale ? *p.scale : 1.0 / std::sqrt(static_cast<double>(p.q.size(3)));
}

// Runs without validating p: callers validate first.
template <class ScoreMod, class MaskMod>
void flex_forward_unchecked(const FlexFwdParams& p, const ScoreMod& sm, const MaskMod& mm) {
  AttentionTensors t = flex_tensors(p);
  if (p.q.dtype == DType::kFloat64)
    run_attention_forward<double>(t, flex_scale(p), flex_problem_factory<double>(p.block_mask, sm, mm));
  else
    run_attention_forward<float>(t, static_cast<float>(flex_scale(p)), flex_problem_factory<float>(p.block_mask, sm, mm));
}

template <class ScoreMod, class MaskMod>
void flex_backward_unchecked(const FlexBwdParams& p, const ScoreMod& sm, const MaskMod& mm) {
  AttentionTensors t = flex_tensors(p);
  t.dout = {p.dout, nullptr, 0, 2, 1};
  t.dq = {p.dq, nullptr, 0, 2, 1};
  t.dk = {p.dk, nullptr, 0, 2, 1};
  t.dv = {p.dv, nullptr, 0, 2, 1};
  t.lse = {p.lse, nullptr};
  if (p.q.dtype == DType::kFloat64)
    run_attention_backward<double>(t, flex_scale(p), GqaReduction::kSplit, p.deterministic,
                                   flex_problem_factory<double>(p.block_mask, sm, mm));
  else
    run_attention_backward<float>(t, static_cast<float>(flex_scale(p)), GqaReduction::kSplit, p.deterministic,
                                  flex_problem_factory<float>(p.block_mask, sm, mm));
}

template <class ScoreMod, class MaskMod>
Status flex_forward_with_mods(const FlexFwdParams& p, const ScoreMod& sm, const MaskMod& mm) {
  ATTNKIT_RETURN_IF_ERROR(validate(p));
  if (p.q.device.type != DeviceType::kCPU) return InvalidArgument("q: flex_forward_with_mods runs on the CPU; got a CUDA tensor");
  flex_forward_unchecked(p, sm, mm);
  return Status::Ok();
}

template <class ScoreMod, class MaskMod>
Status flex_backward_with_mods(const FlexBwdParams& p, const ScoreMod& sm, const MaskMod& mm) {
  ATTNKIT_RETURN_IF_ERROR(validate(p));
  if (p.q.device.type != DeviceType::kCPU) return InvalidArgument("q: flex_backward_with_mods runs on the CPU; got a CUDA tensor");
  flex_backward_unchecked(p, sm, mm);
  return Status::Ok();
}

}  // namespace attnkit::cpu
