// attnkit/flex.hpp — flex attention: score_mod / mask_mod plus torch's block-sparse BlockMask.
//
// Logical layout [B, H, S, D] for q/k/v/out (as torch flex_attention), any strides with unit last
// dim; GQA when Hq % Hkv == 0; lse [B, Hq, Sq] fp32 (optional, natural log).
// This header is the runtime-configured entry point: the built-in catalog of mods, combined by
// FlexMods. To use your own functors, see attnkit/cpu/flex_cpu.hpp (CPU) — the mods there are
// plain functor types.
#pragma once
#include <cstdint>
#include <optional>
#include "attnkit/status.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {

// torch's BlockMask tensors, passed as they are. kv_* drive the forward (and the CPU backward);
// q_* are the transposed lists a GPU backward streams over. The B and H dims may be 1 (broadcast).
struct BlockMaskView {
  TensorView kv_num_blocks;       // int32 [B|1, H|1, ceil(Sq/BQ)]
  TensorView kv_indices;          // int32 [B|1, H|1, ceil(Sq/BQ), ceil(Sk/BK)]
  TensorView full_kv_num_blocks;  // optional: blocks known fully visible (mask_mod skipped)
  TensorView full_kv_indices;
  TensorView q_num_blocks, q_indices, full_q_num_blocks, full_q_indices;  // optional, backward
  int64_t block_q = 128;
  int64_t block_k = 128;
  bool defined() const { return kv_num_blocks.defined(); }
};

// The built-in catalog (spec/attention.md, Flex). Every enabled part applies; score mods in the
// order rel_bias, alibi, softcap; mask mods are and-ed. Indices are absolute positions (q_idx,
// kv_idx as torch passes them).
struct FlexMods {
  // score mods
  TensorView rel_bias;      // fp32 [H|1, 2*Sk-1]: score += rel_bias[h, (q - kv) + Sk - 1]
  TensorView alibi_slopes;  // fp32 [H]: score += slope[h] * (kv - q)
  double softcap = 0.0;     // > 0: score = softcap * tanh(score / softcap)
  // mask mods
  bool causal = false;           // kv <= q
  TensorView prefix_lengths;     // int32 [B]: with causal, kv < prefix[b] is also visible (prefix-LM)
  int64_t sliding_window = -1;   // >= 0: q - window <= kv (and with causal kv <= q)
  TensorView document_ids_q;     // int32 [B, Sq] and [B, Sk]: visible only inside one document
  TensorView document_ids_kv;
  bool has_score_mod() const { return rel_bias.defined() || alibi_slopes.defined() || softcap > 0; }
  bool has_mask_mod() const {
    return causal || prefix_lengths.defined() || sliding_window >= 0 || document_ids_q.defined();
  }
};

struct FlexFwdParams {
  TensorView q, k, v, out;
  TensorView lse;  // optional
  std::optional<double> scale;  // default 1/sqrt(D); any finite value (score_mod sees scale * q.k)
  FlexMods mods;
  BlockMaskView block_mask;  // optional: without it every block is visited
  // CUDA short-query path (Sq <= 64, long KV): the keys of each (batch, head) split over this many
  // CTAs, merged afterwards. 0 chooses from the shapes, 1 turns it off; the CPU ignores it.
  int num_splits = 0;
  Workspace workspace;  // flex_forward_workspace_size(): larger when the split is on
  Stream stream = nullptr;
};

struct FlexBwdParams {
  TensorView q, k, v, out, lse, dout;
  TensorView dq, dk, dv;
  std::optional<double> scale;
  FlexMods mods;
  BlockMaskView block_mask;
  bool deterministic = false;
  Workspace workspace;
  Stream stream = nullptr;
};

size_t flex_forward_workspace_size(const FlexFwdParams& p);
size_t flex_backward_workspace_size(const FlexBwdParams& p);
Status flex_attention_forward(const FlexFwdParams& p);
Status flex_attention_backward(const FlexBwdParams& p);

}  // namespace attnkit
