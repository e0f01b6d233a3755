"""flash-linear-attention's gated delta rule functions on attnkit's ops (spec/gdn.md).

`chunk_gated_delta_rule` and `fused_recurrent_gated_delta_rule` take FLA's arguments and return
(o, final_state or None) as FLA does: q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV];
varlen with B == 1 and int64 cu_seqlens [N+1]; states fp32 [N, HV, K, V] ([N, HV, V, K] with
state_v_first). Extensions: a per-key gate `gk` [B, T, HV, K] in place of g, and
`fused_recurrent_gated_delta_rule_update_`, the serving decode that updates a state pool in place
through per-sequence state indices.
"""

import warnings

import torch

from attnkit import _registrations

__all__ = ["chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "fused_recurrent_gated_delta_rule_update_",
           "chunk_gated_delta_rule_bwd_dhu"]


def _state_v_first(state_v_first, kwargs):
    if "transpose_state_layout" in kwargs:  # FLA's deprecated name
        if state_v_first:
            raise ValueError("attnkit: pass either state_v_first or transpose_state_layout, not both")
        warnings.warn("transpose_state_layout is deprecated; use state_v_first", DeprecationWarning, stacklevel=3)
        return bool(kwargs.pop("transpose_state_layout"))
    return state_v_first


def _fused_gate(use_gate_in_kernel, g, A_log, dt_bias):
    """(A_log, dt_bias) for the op: both or neither (FLA allows dt_bias=None, meaning 0)."""
    if not use_gate_in_kernel:
        return None, None
    if A_log is None:
        raise ValueError("attnkit: A_log must be provided when use_gate_in_kernel=True")
    if g is None:
        raise ValueError("attnkit: g (the raw gate) must be provided when use_gate_in_kernel=True")
    if dt_bias is None:
        dt_bias = torch.zeros(A_log.shape, dtype=A_log.dtype, device=A_log.device)
    return A_log, dt_bias


def _beta(beta, use_beta_sigmoid_in_kernel, allow_neg_eigval):
    """(beta, beta_is_logit): with allow_neg_eigval beta = 2 sigmoid(raw), computed here."""
    if allow_neg_eigval:
        if not use_beta_sigmoid_in_kernel:
            raise ValueError("attnkit: allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True")
        return 2.0 * torch.sigmoid(beta.float()).to(beta.dtype), False
    return beta, use_beta_sigmoid_in_kernel


def _refuse_unknown(kwargs):
    unknown = set(kwargs) - {"chunk_size", "use_gate_in_kernel", "A_log", "dt_bias", "gk"}
    if unknown:
        raise TypeError(f"attnkit: unexpected keyword arguments {sorted(unknown)}")


def _keep_code(keep_intermediates, q, v, cu_seqlens):
    """chunk_gated_delta_rule's keep_intermediates -> the op's keep: 0 nothing, 1 T, 2 all. "auto": T
    where the backward's rerun then forms w and u inside the recurrence kernel (K = V = 128 and at
    least 96 (sequence, value head, 64-column value block) chains: src/cuda/gdn/chunk_host.hpp's
    kWuInRecurrenceChains, bar its 16-byte row alignment, which a fake tensor cannot tell and which
    only picks between two kernels that both read T), else nothing. From shapes alone: a traced
    graph decides as eager does."""
    if keep_intermediates == "auto":
        if q.dim() != 4 or v.dim() != 4 or (cu_seqlens is not None and cu_seqlens.dim() != 1):
            return 0  # the op refuses these with its own message
        seqs = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
        chains = seqs * v.shape[2] * (v.shape[3] // 64)
        return 1 if q.shape[3] == 128 and v.shape[3] == 128 and chains >= 96 else 0
    if keep_intermediates is None or keep_intermediates is False:
        return 0
    if keep_intermediates is True or keep_intermediates == "all":
        return 2
    if keep_intermediates == "t":
        return 1
    raise ValueError(f'attnkit: keep_intermediates: expected "auto", "t", True / "all" or False / None, '
                     f'got {keep_intermediates!r}')


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                           state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, chunk_indices=None,
                           cp_context=None, keep_intermediates="auto", **kwargs):
    """Chunked forward (and, through autograd, backward) of the gated delta rule -> (o, final_state).

    keep_intermediates (CUDA, when a gradient is needed): what the forward keeps for the backward,
    held until then.
      "auto" (default): "t" at K = V = 128 with at least 96 (sequence, value head, 64-column value
        block) chains, where it pays, else nothing (docs/perf/gdn_chunk_bwd.md).
      "t": the chunks' T = (I + L)^-1, 16-bit [B, T, HV, 64] (half v's bytes at V = 128; what FLA's
        forward keeps as A), and with use_qk_l2norm_in_kernel the inverse norms of q's and k's rows
        (4 bytes a token and head), with which the backward normalises q, k on chip. The backward reruns the forward's state pass, with w and u formed from
        T instead of a second inverse (at K = 128 with many chains inside the recurrence kernel): on
        an H200 forward + backward ~4% faster than keeping nothing at B4 T8192 H16 and at a varlen
        batch of 20 sequences (H64); with few chains no faster (B1 T8192 H16 the same, B1 T32768 H32
        +0.8%).
      False or None: nothing: the backward reruns the forward's kernels whole; the least memory.
      True or "all": also w, gamma, v_new and every chunk's start state (at K = V = 128 about 4.5x
        the bytes of v): the backward reruns none of the forward's kernels; the fastest."""
    state_v_first = _state_v_first(state_v_first, kwargs)
    if cp_context is not None:
        raise NotImplementedError("attnkit: cp_context (context parallelism) is not supported")
    _refuse_unknown(kwargs)
    if kwargs.get("chunk_size", 64) not in (16, 32, 64):
        raise ValueError(f"attnkit: chunk_size must be 16, 32 or 64, got {kwargs['chunk_size']}")
    A_log, dt_bias = _fused_gate(kwargs.get("use_gate_in_kernel", False), g, kwargs.get("A_log"), kwargs.get("dt_bias"))
    beta, beta_is_logit = _beta(beta, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    gk = kwargs.get("gk")
    if gk is not None and g is not None:
        raise ValueError("attnkit: give either g or gk, not both")
    keep = _keep_code(keep_intermediates, q, v, cu_seqlens)  # checked even where nothing will be kept
    if not (torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (q, k, v, beta, g, gk, A_log, dt_bias, initial_state))):
        keep = 0
    o, final_state, _ = _registrations.run(
        _registrations.GdnChunkFunction, torch.ops.attnkit.gdn_chunk_fwd,
        q, k, v, beta, g, gk, A_log, dt_bias, initial_state, cu_seqlens, scale,
        state_v_first, use_qk_l2norm_in_kernel, beta_is_logit, output_final_state, keep)
    return o, (final_state if output_final_state else None)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                                     A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                                     state_v_first=False, cu_seqlens=None, **kwargs):
    """The token recurrence (decode: a few tokens per sequence) -> (o, final_state)."""
    state_v_first = _state_v_first(state_v_first, kwargs)
    if gv is not None:
        raise NotImplementedError("attnkit: gv (per-value gate) is not supported")
    _refuse_unknown(kwargs)
    if beta is None:
        beta = torch.ones(v.shape[:3], dtype=q.dtype, device=q.device)
    A_log, dt_bias = _fused_gate(use_gate_in_kernel, g, A_log, dt_bias)
    beta, beta_is_logit = _beta(beta, use_beta_sigmoid_in_kernel, allow_neg_eigval)
    o, final_state = _registrations.run(
        _registrations.GdnRecurrentFunction, torch.ops.attnkit.gdn_recurrent,
        q, k, v, beta, g, gk, A_log, dt_bias, initial_state, cu_seqlens, scale,
        state_v_first, use_qk_l2norm_in_kernel, beta_is_logit)
    return o, (final_state if output_final_state else None)


def fused_recurrent_gated_delta_rule_update_(q, k, v, state, g=None, gk=None, beta=None, scale=None,
                                             state_indices=None, cu_seqlens=None, use_qk_l2norm_in_kernel=False,
                                             use_gate_in_kernel=False, A_log=None, dt_bias=None,
                                             use_beta_sigmoid_in_kernel=False, state_v_first=False):
    """Decode into `state` (fp32 pool [P, HV, K, V]) in place; sequence n uses state[state_indices[n]]
    (a negative index skips the sequence and gives output 0). Returns o. No autograd."""
    if beta is None:
        beta = torch.ones(v.shape[:3], dtype=q.dtype, device=q.device)
    A_log, dt_bias = _fused_gate(use_gate_in_kernel, g, A_log, dt_bias)
    return torch.ops.attnkit.gdn_recurrent_(
        q, k, v, beta, state, g, gk, A_log, dt_bias, state_indices, cu_seqlens, scale, state_v_first,
        use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel)


def chunk_gated_delta_rule_bwd_dhu(q, k, w, do, dv, g=None, gk=None, h0=None, dht=None, scale=None, state_v_first=False,
                                   cu_seqlens=None, chunk_size=64, chunk_indices=None, chunk_offsets=None,
                                   use_graph=False):
    """The reverse state-gradient pass of the chunked backward (FLA's fla.ops.common.chunk_delta_h
    function of this name) -> (dh [B, NT, HV, K, V] in q's dtype, dh0 fp32 or None, dv2).

    g / gk are FLA's in-chunk cumulative gates, which FLA keeps in base 2 (chunk_local_cumsum with
    scale 1/ln 2); torch.ops.attnkit.gdn_bwd_dhu reads them as they are (gates_log2=True) instead
    of a converted copy (with gk, a copy as large as k). h0 only says whether dh0 is wanted (its
    shape, [N, HV, K, V])."""
    if chunk_size != 64:
        raise NotImplementedError(f"attnkit: chunk_size must be 64, got {chunk_size}")
    g = g.float() if g is not None else None  # no copy when already fp32, as FLA's are
    gk = gk.float() if gk is not None else None
    dh, dh0, dv2 = torch.ops.attnkit.gdn_bwd_dhu(q, k, w, do, dv, g, gk, dht, cu_seqlens, scale, state_v_first,
                                                  h0 is not None, gates_log2=True)
    return dh, (dh0 if h0 is not None else None), dv2
