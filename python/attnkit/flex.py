"""torch's flex_attention on attnkit's flex ops, with a catalog of score/mask mods.

attnkit runs compiled mods, not Python closures, so `score_mod` and the BlockMask's `mask_mod`
must come from this module's catalog. Each catalog object is also an ordinary torch mod (callable
as score_mod(score, b, h, q_idx, kv_idx) or mask_mod(b, h, q_idx, kv_idx)), so the same object
builds a BlockMask with torch's create_block_mask and runs under torch's own flex_attention:

    mask = attnkit.flex.and_masks(attnkit.flex.causal(), attnkit.flex.sliding_window(256))
    block_mask = create_block_mask(mask, B=None, H=None, Q_LEN=S, KV_LEN=S, device="cuda")
    out = attnkit.flex_attention(q, k, v, score_mod=attnkit.flex.softcap(30.0), block_mask=block_mask)

Score mods apply in the order rel_bias, alibi, softcap (compose_scores checks it); mask mods are
and-ed. Layout as torch: q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D]; lse natural log, no gradient.
"""

import dataclasses

import torch

from attnkit import _registrations

__all__ = ["ScoreMod", "MaskMod", "alibi", "softcap", "relative_position_bias", "compose_scores", "causal",
           "sliding_window", "prefix_lm", "document_mask", "and_masks", "flex_attention"]


@dataclasses.dataclass(frozen=True, eq=False)
class ScoreMod:
    """rel_bias [H|1, 2*Sk-1] fp32, alibi_slopes [H] fp32, softcap (> 0 enables), applied in that order."""
    rel_bias: torch.Tensor | None = None
    alibi_slopes: torch.Tensor | None = None
    softcap: float = 0.0

    def __post_init__(self):
        # torch's flex compiles mods and refuses a captured Python float: __call__ reads this 0-dim
        # copy (None when off) and never self.softcap
        cap = torch.tensor(float(self.softcap), dtype=torch.float32) if self.softcap > 0 else None
        object.__setattr__(self, "_softcap_tensor", cap)

    def __call__(self, score, b, h, q_idx, kv_idx):
        if self.rel_bias is not None:
            heads = self.rel_bias.shape[0]
            score = score + self.rel_bias[h if heads > 1 else 0, q_idx - kv_idx + (self.rel_bias.shape[1] + 1) // 2 - 1]
        if self.alibi_slopes is not None:
            score = score + self.alibi_slopes[h] * (kv_idx - q_idx)
        cap = self._softcap_tensor
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        return score


@dataclasses.dataclass(frozen=True, eq=False)
class MaskMod:
    """causal (kv <= q, or kv < prefix_lengths[b]), sliding_window (q - kv <= window), documents; and-ed."""
    causal: bool = False
    prefix_lengths: torch.Tensor | None = None
    sliding_window: int = -1
    document_ids_q: torch.Tensor | None = None
    document_ids_kv: torch.Tensor | None = None

    def __call__(self, b, h, q_idx, kv_idx):
        visible = q_idx == q_idx
        if self.causal:
            past = kv_idx <= q_idx
            if self.prefix_lengths is not None:
                past = past | (kv_idx < self.prefix_lengths[b])
            visible = visible & past
        if self.sliding_window >= 0:
            visible = visible & (q_idx - kv_idx <= self.sliding_window)
        if self.document_ids_q is not None:
            visible = visible & (self.document_ids_q[b, q_idx] == self.document_ids_kv[b, kv_idx])
        return visible


def alibi(slopes):
    """score + slopes[h] * (kv - q); slopes [H] (kept as fp32)."""
    return ScoreMod(alibi_slopes=slopes.to(torch.float32))


def softcap(cap):
    """cap * tanh(score / cap)."""
    if not cap > 0:
        raise ValueError(f"attnkit.flex.softcap: cap must be > 0, got {cap}")
    return ScoreMod(softcap=float(cap))


def relative_position_bias(table):
    """score + table[h, q - kv + Sk - 1]; table [H|1, 2*Sk - 1] (kept as fp32)."""
    return ScoreMod(rel_bias=table.to(torch.float32))


def compose_scores(*mods):
    """The composition mods[-1](...mods[0](score)); the order must be rel_bias, alibi, softcap."""
    merged, rank = ScoreMod(), -1
    for mod in mods:
        for i, field in enumerate(("rel_bias", "alibi_slopes", "softcap")):
            value = getattr(mod, field)
            if value is None or (field == "softcap" and value == 0.0):
                continue
            if i <= rank:
                raise ValueError("attnkit.flex.compose_scores: mods apply in the order relative_position_bias, "
                                 f"alibi, softcap; got {field} after a later or equal one")
            rank = i
            merged = dataclasses.replace(merged, **{field: value})
    return merged


def causal():
    return MaskMod(causal=True)


def sliding_window(window):
    """q - window <= kv (and with causal() kv <= q): the `window` keys before each query."""
    if window < 0:
        raise ValueError(f"attnkit.flex.sliding_window: window must be >= 0, got {window}")
    return MaskMod(sliding_window=int(window))


def prefix_lm(prefix_lengths):
    """Causal, plus every key before prefix_lengths[b] (int32 [B]) visible to every query."""
    return MaskMod(causal=True, prefix_lengths=prefix_lengths)


def document_mask(document_ids_q, document_ids_kv=None):
    """Query and key see each other only inside one document; int32 ids [B, Sq] and [B, Sk]."""
    return MaskMod(document_ids_q=document_ids_q,
                   document_ids_kv=document_ids_q if document_ids_kv is None else document_ids_kv)


def and_masks(*mods):
    """The intersection of catalog masks."""
    merged = MaskMod()
    for mod in mods:
        if not isinstance(mod, MaskMod):
            raise TypeError(f"attnkit.flex.and_masks: expected attnkit.flex mask mods, got {mod!r}")
        for field in dataclasses.fields(MaskMod):
            value, default = getattr(mod, field.name), field.default
            if value is default or (value is None and default is None):
                continue
            if getattr(merged, field.name) is not default:
                raise ValueError(f"attnkit.flex.and_masks: {field.name} is given twice")
            merged = dataclasses.replace(merged, **{field.name: value})
    return merged


def _mask_of(block_mask):
    if block_mask is None:
        return MaskMod(), []
    mask_mod = block_mask.mask_mod
    if isinstance(mask_mod, MaskMod):
        mask = mask_mod
    elif getattr(mask_mod, "__name__", "") == "noop_mask":
        mask = MaskMod()
    else:
        raise TypeError("attnkit.flex_attention: block_mask.mask_mod must be an attnkit.flex mask mod "
                        f"(causal, sliding_window, prefix_lm, document_mask, and_masks), got {mask_mod!r}")
    tensors = [block_mask.kv_num_blocks, block_mask.kv_indices, block_mask.full_kv_num_blocks,
               block_mask.full_kv_indices, block_mask.q_num_blocks, block_mask.q_indices,
               block_mask.full_q_num_blocks, block_mask.full_q_indices]
    return mask, tensors


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, return_aux=None, deterministic=False):
    """torch.nn.attention.flex_attention.flex_attention's arguments and return values."""
    if score_mod is None:
        score_mod = ScoreMod()
    if not isinstance(score_mod, ScoreMod):
        raise TypeError("attnkit.flex_attention: score_mod must be an attnkit.flex score mod (alibi, softcap, "
                        f"relative_position_bias, compose_scores), got {score_mod!r}")
    if return_aux is not None and getattr(return_aux, "max_scores", False):
        raise NotImplementedError("attnkit.flex_attention: return_aux.max_scores is not supported")
    if query.dim() == 4 and key.dim() == 4 and query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"attnkit.flex_attention: query has {query.shape[1]} heads and key {key.shape[1]}: "
                         "pass enable_gqa=True for grouped-query attention")
    mask, tensors = _mask_of(block_mask)
    block_q, block_k = block_mask.BLOCK_SIZE if block_mask is not None else (128, 128)
    if block_mask is not None and tuple(block_mask.seq_lengths) != (query.shape[-2], key.shape[-2]):
        raise ValueError(f"attnkit.flex_attention: block_mask was built for (Q_LEN, KV_LEN) = "
                         f"{tuple(block_mask.seq_lengths)}, the inputs have ({query.shape[-2]}, {key.shape[-2]})")
    out, lse = _registrations.run(
        _registrations.FlexFunction, torch.ops.attnkit.flex_fwd,
        query, key, value, scale, score_mod.rel_bias, score_mod.alibi_slopes,
        score_mod.softcap, mask.causal, mask.prefix_lengths, mask.sliding_window, mask.document_ids_q,
        mask.document_ids_kv, tensors, block_q, block_k, deterministic)
    if return_aux is not None:
        from torch.nn.attention.flex_attention import AuxOutput
        return out, AuxOutput(lse=lse if return_aux.lse else None)
    return (out, lse) if return_lse else out
