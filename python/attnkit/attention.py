"""flash_attn's functions on attnkit's softmax attention ops (torch.ops.attnkit.attention_fwd/bwd).

Same arguments and return values as flash_attn 2's `flash_attn_func` / `flash_attn_varlen_func`
(q [B, Sq, Hq, D] or packed [total_q, Hq, D] with int32 cu_seqlens; causal bottom-right aligned;
window_size=(left, right) with -1 for unbounded; softcap; deterministic backward), plus two
keyword-only options of attnkit's own: `causal_top_left` (torch SDPA's alignment) and
`gqa_reduction` (how dK/dV gather a kv head's query heads: "auto", the backend's choice — on the
GPU the group's heads in one CTA summed in registers where measured faster, else fp32 atomics —,
or "split", per query head summed in a fixed order).
The LSE (return_attn_probs=True) is fp32 in natural log, [B, Hq, Sq] or [Hq, total_q], and carries
no gradient, as in flash_attn; the third value (flash_attn's dropout mask) is always None.
"""

import torch

from attnkit import _registrations

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func"]


def _refuse_unsupported(dropout_p, alibi_slopes, gqa_reduction, window_size):
    if dropout_p != 0.0:
        raise NotImplementedError(f"attnkit: dropout_p must be 0.0 (attnkit has no dropout), got {dropout_p}")
    if alibi_slopes is not None:
        raise NotImplementedError("attnkit: alibi_slopes is not supported by flash_attn_func; "
                                  "use attnkit.flex_attention with attnkit.flex.alibi(slopes)")
    if gqa_reduction not in ("auto", "split"):
        raise ValueError(f"attnkit: gqa_reduction must be 'auto' or 'split', got {gqa_reduction!r}")
    if len(window_size) != 2:
        raise ValueError(f"attnkit: window_size must be (left, right), got {window_size!r}")


def _result(out, lse, return_attn_probs):
    return (out, lse, None) if return_attn_probs else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, causal_top_left=False,
                    gqa_reduction="auto"):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> out [B, Sq, Hq, D] (and lse [B, Hq, Sq])."""
    _refuse_unsupported(dropout_p, alibi_slopes, gqa_reduction, window_size)
    out, lse = _registrations.run(
        _registrations.AttentionFunction, torch.ops.attnkit.attention_fwd,
        q, k, v, None, None, 0, 0, softmax_scale, causal, causal_top_left,
        int(window_size[0]), int(window_size[1]), float(softcap), deterministic, gqa_reduction == "split")
    return _result(out, lse, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *,
                           causal_top_left=False, gqa_reduction="auto"):
    """q [total_q, Hq, D], k/v [total_k, Hkv, D], cu_seqlens int32 [N+1] -> out [total_q, Hq, D]."""
    _refuse_unsupported(dropout_p, alibi_slopes, gqa_reduction, window_size)
    if block_table is not None:
        raise NotImplementedError("attnkit: block_table (paged KV) is not supported")
    out, lse = _registrations.run(
        _registrations.AttentionFunction, torch.ops.attnkit.attention_fwd,
        q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
        softmax_scale, causal, causal_top_left, int(window_size[0]), int(window_size[1]), float(softcap),
        deterministic, gqa_reduction == "split")
    return _result(out, lse, return_attn_probs)


# The packed variants: q, k, v are strided views of the packed tensor (no copy; the kernels take any
# strides with a unit last one), and autograd carries their gradients back into it.

def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                              alibi_slopes=None, deterministic=False, return_attn_probs=False, **kwargs):
    """qkv [B, S, 3, H, D] -> out [B, S, H, D]."""
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
                           softcap, alibi_slopes, deterministic, return_attn_probs, **kwargs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                             alibi_slopes=None, deterministic=False, return_attn_probs=False, **kwargs):
    """q [B, Sq, Hq, D], kv [B, Sk, 2, Hkv, D] -> out [B, Sq, Hq, D]."""
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs, **kwargs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, **kwargs):
    """qkv [total, 3, H, D], cu_seqlens int32 [N+1] -> out [total, H, D]."""
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, **kwargs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False, **kwargs):
    """q [total_q, Hq, D], kv [total_k, 2, Hkv, D] -> out [total_q, Hq, D]."""
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, **kwargs)
