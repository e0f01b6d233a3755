// src/api/validate_flex.cpp — validation of flex attention params: q/k/v [B, H, S, D], the
// catalog mods, and torch's BlockMask tensors (shapes always; index ranges when host-readable).
#include <string>

#include "attnkit/cpu/io.hpp"
#include "attnkit/validate.hpp"
#include "src/api/checks.hpp"

namespace attnkit {
namespace {
using namespace checks;

struct FlexShape {
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Sk = 0, D = 0, Dv = 0;
};

template <class P>
Status check_qkv(const P& p, FlexShape& s) {
  ATTNKIT_RETURN_IF_ERROR(defined(p.q, "q"));
  const Device dev = p.q.device;
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.q, "q", 4, "[B, Hq, Sq, D]", dev));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.k, "k", 4, "[B, Hkv, Sk, D]", dev));
  ATTNKIT_RETURN_IF_ERROR(float_tensor(p.v, "v", 4, "[B, Hkv, Sk, Dv]", dev));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(p.k, "k", p.q, "q"));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(p.v, "v", p.q, "q"));
  s = {p.q.size(0), p.q.size(1), p.k.size(1), p.q.size(2), p.k.size(2), p.q.size(3), p.v.size(3)};
  ATTNKIT_RETURN_IF_ERROR(size_is(p.k, "k", 0, s.B, "B (q.size(0))"));
  ATTNKIT_RETURN_IF_ERROR(shape_is(p.v, "v", {s.B, s.Hkv, s.Sk, s.Dv}, "[B, Hkv, Sk, Dv]"));
  ATTNKIT_RETURN_IF_ERROR(size_is(p.k, "k", 3, s.D, "D (q.size(3))"));
  ATTNKIT_RETURN_IF_ERROR(in_range(s.D, "q (head dim D)", 1, 512));
  ATTNKIT_RETURN_IF_ERROR(in_range(s.Dv, "v (head dim Dv)", 1, 512));
  ATTNKIT_RETURN_IF_ERROR(at_least(s.Hkv, "k (head count Hkv)", 1));
  ATTNKIT_RETURN_IF_ERROR(divisible(s.Hq, "q (head count Hq)", s.Hkv, "Hkv, the kv head count"));
  if (p.scale) ATTNKIT_RETURN_IF_ERROR(finite(*p.scale, "scale"));
  return Status::Ok();
}

Status check_out(const TensorView& t, const char* name, const FlexShape& s, const TensorView& q, int64_t H,
                 int64_t S, int64_t D, const TensorView& dtype_ref, const char* ref_name) {
  ATTNKIT_RETURN_IF_ERROR(float_tensor(t, name, 4, "[B, H, S, D]", q.device));
  ATTNKIT_RETURN_IF_ERROR(same_dtype(t, name, dtype_ref, ref_name));
  return shape_is(t, name, {s.B, H, S, D}, "[B, H, S, D]");
}

Status check_lse(const TensorView& lse, const FlexShape& s, const Device& dev) {
  ATTNKIT_RETURN_IF_ERROR(dtype_in(lse, "lse", {DType::kFloat32}));
  ATTNKIT_RETURN_IF_ERROR(on_device(lse, "lse", dev));
  ATTNKIT_RETURN_IF_ERROR(non_negative_strides(lse, "lse"));
  ATTNKIT_RETURN_IF_ERROR(data_present(lse, "lse"));
  return shape_is(lse, "lse", {s.B, s.Hq, s.Sq}, "[B, Hq, Sq]");
}

Status int_tensor(const TensorView& t, const char* name, int nd, const char* layout, const Device& dev) {
  ATTNKIT_RETURN_IF_ERROR(dims(t, name, nd, layout));
  ATTNKIT_RETURN_IF_ERROR(dtype_in(t, name, {DType::kInt32}));
  ATTNKIT_RETURN_IF_ERROR(on_device(t, name, dev));
  ATTNKIT_RETURN_IF_ERROR(non_negative_strides(t, name));
  return data_present(t, name);
}

Status check_mods(const FlexMods& m, const FlexShape& s, const Device& dev) {
  if (m.rel_bias.defined()) {
    ATTNKIT_RETURN_IF_ERROR(dims(m.rel_bias, "mods.rel_bias", 2, "[H|1, 2*Sk-1]"));
    ATTNKIT_RETURN_IF_ERROR(dtype_in(m.rel_bias, "mods.rel_bias", {DType::kFloat32}));
    ATTNKIT_RETURN_IF_ERROR(on_device(m.rel_bias, "mods.rel_bias", dev));
    if (m.rel_bias.size(0) != 1) ATTNKIT_RETURN_IF_ERROR(size_is(m.rel_bias, "mods.rel_bias", 0, s.Hq, "Hq or 1"));
    ATTNKIT_RETURN_IF_ERROR(size_is(m.rel_bias, "mods.rel_bias", 1, 2 * s.Sk - 1, "2*Sk-1"));
    if (s.Sq > s.Sk)
      return InvalidArgument("mods.rel_bias: expected Sq <= Sk so that every distance q - kv has an entry, got Sq = " +
                             std::to_string(s.Sq) + ", Sk = " + std::to_string(s.Sk));
  }
  if (m.alibi_slopes.defined()) {
    ATTNKIT_RETURN_IF_ERROR(dims(m.alibi_slopes, "mods.alibi_slopes", 1, "[Hq]"));
    ATTNKIT_RETURN_IF_ERROR(dtype_in(m.alibi_slopes, "mods.alibi_slopes", {DType::kFloat32}));
    ATTNKIT_RETURN_IF_ERROR(on_device(m.alibi_slopes, "mods.alibi_slopes", dev));
    ATTNKIT_RETURN_IF_ERROR(size_is(m.alibi_slopes, "mods.alibi_slopes", 0, s.Hq, "Hq"));
  }
  ATTNKIT_RETURN_IF_ERROR(finite(m.softcap, "mods.softcap"));
  if (m.softcap < 0) return InvalidArgument("mods.softcap: expected a value >= 0 (0 disables it), got " + std::to_string(m.softcap));
  if (m.prefix_lengths.defined()) {
    if (!m.causal) return InvalidArgument("mods.prefix_lengths: a prefix-LM mask needs mods.causal = true");
    ATTNKIT_RETURN_IF_ERROR(int_tensor(m.prefix_lengths, "mods.prefix_lengths", 1, "[B]", dev));
    ATTNKIT_RETURN_IF_ERROR(size_is(m.prefix_lengths, "mods.prefix_lengths", 0, s.B, "B"));
  }
  ATTNKIT_RETURN_IF_ERROR(at_least(m.sliding_window, "mods.sliding_window", -1));
  if (m.document_ids_q.defined() != m.document_ids_kv.defined())
    return InvalidArgument(std::string(m.document_ids_q.defined() ? "mods.document_ids_kv" : "mods.document_ids_q") +
                           ": document masking needs both document_ids_q and document_ids_kv");
  if (m.document_ids_q.defined()) {
    ATTNKIT_RETURN_IF_ERROR(int_tensor(m.document_ids_q, "mods.document_ids_q", 2, "[B, Sq]", dev));
    ATTNKIT_RETURN_IF_ERROR(int_tensor(m.document_ids_kv, "mods.document_ids_kv", 2, "[B, Sk]", dev));
    ATTNKIT_RETURN_IF_ERROR(shape_is(m.document_ids_q, "mods.document_ids_q", {s.B, s.Sq}, "[B, Sq]"));
    ATTNKIT_RETURN_IF_ERROR(shape_is(m.document_ids_kv, "mods.document_ids_kv", {s.B, s.Sk}, "[B, Sk]"));
  }
  return Status::Ok();
}

// num [B|1, H|1, rows] with entries in [0, cols]; idx [B|1, H|1, rows, cols] whose first num
// entries of each row lie in [0, cols).
Status check_block_list(const TensorView& num, const char* num_name, const TensorView& idx, const char* idx_name,
                        int64_t rows, int64_t cols, const FlexShape& s, const Device& dev) {
  ATTNKIT_RETURN_IF_ERROR(int_tensor(num, num_name, 3, "[B|1, H|1, blocks]", dev));
  ATTNKIT_RETURN_IF_ERROR(defined(idx, idx_name));
  ATTNKIT_RETURN_IF_ERROR(int_tensor(idx, idx_name, 4, "[B|1, H|1, blocks, blocks]", dev));
  if (num.size(0) != 1) ATTNKIT_RETURN_IF_ERROR(size_is(num, num_name, 0, s.B, "B or 1"));
  if (num.size(1) != 1) ATTNKIT_RETURN_IF_ERROR(size_is(num, num_name, 1, s.Hq, "Hq or 1"));
  ATTNKIT_RETURN_IF_ERROR(size_is(num, num_name, 2, rows, "the number of row blocks"));
  ATTNKIT_RETURN_IF_ERROR(shape_is(idx, idx_name, {num.size(0), num.size(1), rows, cols}, "[B|1, H|1, rows, cols]"));
  if (!host_readable(num) || !host_readable(idx)) return Status::Ok();
  for (int64_t b = 0; b < num.size(0); ++b)
    for (int64_t h = 0; h < num.size(1); ++h)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = static_cast<const int32_t*>(num.data)[b * num.stride(0) + h * num.stride(1) + r * num.stride(2)];
        if (n < 0 || n > cols)
          return InvalidArgument(std::string(num_name) + ": expected counts in [0, " + std::to_string(cols) + "], got " +
                                 std::to_string(n) + " at [" + std::to_string(b) + ", " + std::to_string(h) + ", " +
                                 std::to_string(r) + "]");
        for (int64_t t = 0; t < n; ++t) {
          const int64_t j = static_cast<const int32_t*>(
              idx.data)[b * idx.stride(0) + h * idx.stride(1) + r * idx.stride(2) + t * idx.stride(3)];
          if (j < 0 || j >= cols)
            return InvalidArgument(std::string(idx_name) + ": expected block indices in [0, " + std::to_string(cols) +
                                   "), got " + std::to_string(j) + " at [" + std::to_string(b) + ", " +
                                   std::to_string(h) + ", " + std::to_string(r) + ", " + std::to_string(t) + "]");
        }
      }
  return Status::Ok();
}

Status check_block_mask(const BlockMaskView& m, const FlexShape& s, const Device& dev) {
  if (!m.defined()) {
    if (m.kv_indices.defined() || m.full_kv_num_blocks.defined() || m.q_num_blocks.defined())
      return InvalidArgument("block_mask.kv_num_blocks: is required when any other BlockMask tensor is given");
    return Status::Ok();
  }
  ATTNKIT_RETURN_IF_ERROR(at_least(m.block_q, "block_mask.block_q", 1));
  ATTNKIT_RETURN_IF_ERROR(at_least(m.block_k, "block_mask.block_k", 1));
  const int64_t nq = (s.Sq + m.block_q - 1) / m.block_q, nk = (s.Sk + m.block_k - 1) / m.block_k;
  ATTNKIT_RETURN_IF_ERROR(check_block_list(m.kv_num_blocks, "block_mask.kv_num_blocks", m.kv_indices,
                                           "block_mask.kv_indices", nq, nk, s, dev));
  if (m.full_kv_num_blocks.defined() || m.full_kv_indices.defined()) {
    ATTNKIT_RETURN_IF_ERROR(defined(m.full_kv_num_blocks, "block_mask.full_kv_num_blocks"));
    ATTNKIT_RETURN_IF_ERROR(check_block_list(m.full_kv_num_blocks, "block_mask.full_kv_num_blocks", m.full_kv_indices,
                                             "block_mask.full_kv_indices", nq, nk, s, dev));
  }
  if (m.q_num_blocks.defined() || m.q_indices.defined()) {
    ATTNKIT_RETURN_IF_ERROR(defined(m.q_num_blocks, "block_mask.q_num_blocks"));
    ATTNKIT_RETURN_IF_ERROR(check_block_list(m.q_num_blocks, "block_mask.q_num_blocks", m.q_indices,
                                             "block_mask.q_indices", nk, nq, s, dev));
  }
  if (m.full_q_num_blocks.defined() || m.full_q_indices.defined()) {
    ATTNKIT_RETURN_IF_ERROR(defined(m.full_q_num_blocks, "block_mask.full_q_num_blocks"));
    ATTNKIT_RETURN_IF_ERROR(check_block_list(m.full_q_num_blocks, "block_mask.full_q_num_blocks", m.full_q_indices,
                                             "block_mask.full_q_indices", nk, nq, s, dev));
  }
  return Status::Ok();
}

}  // namespace

Status validate(const FlexFwdParams& p) {
  FlexShape s;
  ATTNKIT_RETURN_IF_ERROR(check_qkv(p, s));
  ATTNKIT_RETURN_IF_ERROR(check_out(p.out, "out", s, p.q, s.Hq, s.Sq, s.Dv, p.q, "q"));
  if (p.lse.defined()) ATTNKIT_RETURN_IF_ERROR(check_lse(p.lse, s, p.q.device));
  ATTNKIT_RETURN_IF_ERROR(check_mods(p.mods, s, p.q.device));
  ATTNKIT_RETURN_IF_ERROR(check_block_mask(p.block_mask, s, p.q.device));
  if (p.num_splits < 0)
    return InvalidArgument("num_splits: expected >= 0 (0 chooses, 1 turns the split off), got " + std::to_string(p.num_splits));
  return workspace(p.workspace, flex_forward_workspace_size(p));
}

Status validate(const FlexBwdParams& p) {
  FlexShape s;
  ATTNKIT_RETURN_IF_ERROR(check_qkv(p, s));
  ATTNKIT_RETURN_IF_ERROR(check_out(p.out, "out", s, p.q, s.Hq, s.Sq, s.Dv, p.q, "q"));
  ATTNKIT_RETURN_IF_ERROR(check_out(p.dout, "dout", s, p.q, s.Hq, s.Sq, s.Dv, p.q, "q"));
  ATTNKIT_RETURN_IF_ERROR(defined(p.lse, "lse"));
  ATTNKIT_RETURN_IF_ERROR(check_lse(p.lse, s, p.q.device));
  ATTNKIT_RETURN_IF_ERROR(check_out(p.dq, "dq", s, p.q, s.Hq, s.Sq, s.D, p.q, "q"));
  ATTNKIT_RETURN_IF_ERROR(check_out(p.dk, "dk", s, p.q, s.Hkv, s.Sk, s.D, p.k, "k"));
  ATTNKIT_RETURN_IF_ERROR(check_out(p.dv, "dv", s, p.q, s.Hkv, s.Sk, s.Dv, p.v, "v"));
  ATTNKIT_RETURN_IF_ERROR(check_mods(p.mods, s, p.q.device));
  ATTNKIT_RETURN_IF_ERROR(check_block_mask(p.block_mask, s, p.q.device));
  return workspace(p.workspace, flex_backward_workspace_size(p));
}

}  // namespace attnkit
