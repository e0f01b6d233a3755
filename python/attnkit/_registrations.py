"""Fake (meta) shapes and autograd for torch.ops.attnkit.*, and the autograd.Functions the public
functions call the forward ops through (the same setup and backward, less host time).

The C++ library names this module (set_python_module), so torch imports it whenever it needs a
fake implementation, e.g. under torch.compile or torch.export with only the library loaded.
Output shapes here mirror python/csrc/*_ops.cpp.
"""

import torch

from attnkit import _library  # noqa: F401  (the ops must exist before registering on them)

ops = torch.ops.attnkit
_F32 = torch.float32


def _new(t):
    """A contiguous tensor like t: the C++ ops allocate contiguous outputs whatever the input
    strides (empty_like would keep a permuted input's strides and mislead the compiler)."""
    return t.new_empty(t.shape)


def _check_rank(t, name, rank, layout):
    torch._check(t.dim() == rank, lambda: f"attnkit: {name}: expected {rank} dims {layout}, got {tuple(t.shape)}")


def _autograd_function(name, op, setup, backward):
    """A torch.autograd.Function running `op` with the setup and backward of the op's
    register_autograd pair, for the public functions (attnkit.flash_attn_func, ...;
    flash_attn's own design). A call through the op's registered autograd costs ~0.2 ms of host
    time: torch.library's forward runs fill_defaults, which rebuilds the schema's argument list once
    per argument (O(n^2) in the ~16 arguments); this path skips it. Positional inputs only, every
    one of the op's arguments."""
    def forward(ctx, *inputs):
        output = op(*inputs)
        setup(ctx, inputs, output)
        return output

    def backward_(ctx, *grads):  # a list argument's gradient (torch.library's form) is one None here
        return tuple(None if isinstance(g, list) else g for g in backward(ctx, *grads))

    return type(name, (torch.autograd.Function,), dict(forward=staticmethod(forward), backward=staticmethod(backward_)))


def run(function, op, *inputs):
    """op(*inputs), through `function` (op's autograd.Function) where a gradient can flow. The op
    comes as an argument: torch.compile calls nothing on the Function class but apply."""
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
        return function.apply(*inputs)
    return op(*inputs)


# --- softmax attention -------------------------------------------------------------------------

@torch.library.register_fake("attnkit::attention_fwd")
def _attention_fwd_fake(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *args, **kwargs):
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    rank, layout = (3, "[total, H, D] (varlen)") if varlen else (4, "[B, S, H, D]")
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        _check_rank(t, name, rank, layout)
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    lse_shape = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    return out, q.new_empty(lse_shape, dtype=_F32)


@torch.library.register_fake("attnkit::attention_bwd")
def _attention_bwd_fake(dout, q, k, v, *args, **kwargs):
    return _new(q), _new(k), _new(v)


def _attention_setup(ctx, inputs, output):
    q, k, v, cu_q, cu_k = inputs[:5]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
    ctx.options = inputs[5:]
    ctx.mark_non_differentiable(lse)  # as flash_attn: the LSE is returned without a gradient


def _attention_backward(ctx, dout, _dlse):
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    dq, dk, dv = ops.attention_bwd(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.options)
    return (dq, dk, dv, None, None) + (None,) * len(ctx.options)  # none for cu_seqlens and the options


torch.library.register_autograd("attnkit::attention_fwd", _attention_backward, setup_context=_attention_setup)
AttentionFunction = _autograd_function("AttentionFunction", ops.attention_fwd, _attention_setup, _attention_backward)


# --- flex attention ----------------------------------------------------------------------------

@torch.library.register_fake("attnkit::flex_fwd")
def _flex_fwd_fake(q, k, v, *args, **kwargs):
    for t, name, layout in ((q, "query", "[B, Hq, Sq, D]"), (k, "key", "[B, Hkv, Sk, D]"), (v, "value", "[B, Hkv, Sk, Dv]")):
        _check_rank(t, name, 4, layout)
    return q.new_empty((*q.shape[:-1], v.shape[-1])), q.new_empty(q.shape[:-1], dtype=_F32)


@torch.library.register_fake("attnkit::flex_bwd")
def _flex_bwd_fake(dout, q, k, v, *args, **kwargs):
    return _new(q), _new(k), _new(v)


# flex_fwd arguments after q, k, v: scale rel_bias alibi_slopes softcap causal prefix_lengths
# sliding_window document_ids_q document_ids_kv block_mask block_q block_k deterministic.
_FLEX_TENSOR_OPTIONS = (1, 2, 5, 7, 8)  # positions (after q, k, v) of the optional tensor arguments
_FLEX_BLOCK_MASK = 9


def _flex_setup(ctx, inputs, output):
    q, k, v = inputs[:3]
    options = list(inputs[3:])
    out, lse = output
    block_mask = list(options[_FLEX_BLOCK_MASK])
    # every tensor goes through save_for_backward (torch.compile traces what is saved there)
    ctx.save_for_backward(q, k, v, out, lse, *(options[i] for i in _FLEX_TENSOR_OPTIONS), *block_mask)
    for i in _FLEX_TENSOR_OPTIONS:
        options[i] = None
    options[_FLEX_BLOCK_MASK] = len(block_mask)
    ctx.options = options
    ctx.mark_non_differentiable(lse)


def _flex_backward(ctx, dout, _dlse):
    q, k, v, out, lse, *saved = ctx.saved_tensors
    options = list(ctx.options)
    for i, t in zip(_FLEX_TENSOR_OPTIONS, saved):
        options[i] = t
    n_block_mask = options[_FLEX_BLOCK_MASK]
    options[_FLEX_BLOCK_MASK] = saved[len(_FLEX_TENSOR_OPTIONS):len(_FLEX_TENSOR_OPTIONS) + n_block_mask]
    dq, dk, dv = ops.flex_bwd(dout, q, k, v, out, lse, *options)
    grads = [None] * len(options)
    grads[_FLEX_BLOCK_MASK] = [None] * n_block_mask
    return (dq, dk, dv, *grads)


torch.library.register_autograd("attnkit::flex_fwd", _flex_backward, setup_context=_flex_setup)
FlexFunction = _autograd_function("FlexFunction", ops.flex_fwd, _flex_setup, _flex_backward)


# --- gated delta rule --------------------------------------------------------------------------

def _gdn_state_shape(q, v, initial_state, cu_seqlens, state_v_first):
    n = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else q.shape[0]
    K, V = q.shape[3], v.shape[3]
    return (n, v.shape[2], V, K) if state_v_first else (n, v.shape[2], K, V)


def _gdn_out(q, v):
    _check_rank(q, "q", 4, "[B, T, H, K]")
    _check_rank(v, "v", 4, "[B, T, HV, V]")
    return q.new_empty((*q.shape[:2], v.shape[2], v.shape[3]))


def _gdn_intermediates_bytes(q, v, gk, cu_seqlens, keep, use_qk_l2norm=False):
    """gdn_intermediates_size() (src/cuda/gdn/chunk_host.hpp's Intermediates): keep 2 (all): w [rows,
    HV, K], T [rows, HV, 64], v_new [rows, HV, V] (16-bit), gamma [B, HV, T] (fp32), each chunk's
    start state [slots, HV, K, V] (16-bit); keep 1: T, varlen the backward's slot tables (int64 [N],
    int4 [slots]; 0 < rows < 2^31 - 1), and with the in-op l2norm the inverse norms of q's and k's
    rows [B, H, T] (fp32); every buffer rounded up to 256 bytes. 0 with keep 0 or where the CUDA
    chunked forward keeps nothing (the CPU; inputs it refuses,
    which then fail in the op itself)."""
    if not keep:
        return 0
    B, T, K = q.shape[0], q.shape[1], q.shape[3]
    HV, V = v.shape[2], v.shape[3]
    if q.device.type != "cuda" or gk is not None or q.dtype not in (torch.bfloat16, torch.float16) or K != V \
            or K not in (64, 128):
        return 0
    rows = B * T
    slots = T // 64 + (cu_seqlens.shape[0] - 1) if cu_seqlens is not None else B * ((T + 63) // 64)

    def round256(n):
        return (n + 255) // 256 * 256

    if keep == 1:
        norms = 2 * round256(rows * q.shape[2] * 4) if use_qk_l2norm else 0
        tables = 0
        if cu_seqlens is not None and 0 < rows < 2**31 - 1:
            tables = round256((cu_seqlens.shape[0] - 1) * 8) + round256(slots * 16)
        return round256(rows * HV * 64 * 2) + tables + norms
    return (round256(rows * HV * K * 2) + round256(rows * HV * 64 * 2) + round256(rows * HV * V * 2) +
            round256(rows * HV * 4) + round256(slots * HV * K * V * 2))


@torch.library.register_fake("attnkit::gdn_chunk_fwd")
def _gdn_chunk_fwd_fake(q, k, v, beta, g=None, gk=None, A_log=None, dt_bias=None, initial_state=None,
                        cu_seqlens=None, scale=None, state_v_first=False, use_qk_l2norm=False,
                        beta_is_logit=False, output_final_state=False, keep=0):
    if keep not in (0, 1, 2):
        raise ValueError(f"attnkit: keep: expected 0 (nothing), 1 (T) or 2 (all), got {keep}")
    out = _gdn_out(q, v)
    kept = _gdn_intermediates_bytes(q, v, gk, cu_seqlens, keep, use_qk_l2norm)
    intermediates = q.new_empty((kept,), dtype=torch.uint8)
    if not output_final_state:
        return out, q.new_empty((0,), dtype=_F32), intermediates
    return out, q.new_empty(_gdn_state_shape(q, v, initial_state, cu_seqlens, state_v_first), dtype=_F32), intermediates


@torch.library.register_fake("attnkit::gdn_recurrent")
def _gdn_recurrent_fake(q, k, v, beta, g=None, gk=None, A_log=None, dt_bias=None, initial_state=None,
                        cu_seqlens=None, scale=None, state_v_first=False, use_qk_l2norm=False, beta_is_logit=False):
    out = _gdn_out(q, v)
    return out, q.new_empty(_gdn_state_shape(q, v, initial_state, cu_seqlens, state_v_first), dtype=_F32)


@torch.library.register_fake("attnkit::gdn_recurrent_")
def _gdn_recurrent_inplace_fake(q, k, v, beta, state, *args, **kwargs):
    return _gdn_out(q, v)


@torch.library.register_fake("attnkit::gdn_chunk_bwd")
def _gdn_chunk_bwd_fake(dout, dfinal_state, q, k, v, beta, g=None, gk=None, A_log=None, dt_bias=None,
                        initial_state=None, cu_seqlens=None, scale=None, state_v_first=False, *args, **kwargs):
    def like(t):
        return _new(t) if t is not None else q.new_empty((0,), dtype=_F32)

    dh0 = (q.new_empty(_gdn_state_shape(q, v, initial_state, cu_seqlens, state_v_first), dtype=_F32)
           if initial_state is not None else q.new_empty((0,), dtype=_F32))
    dg = like(g) if g is not None else like(gk)
    return like(q), like(k), like(v), like(beta), dg, dh0, like(A_log), like(dt_bias)


@torch.library.register_fake("attnkit::gdn_bwd_dhu")
def _gdn_bwd_dhu_fake(q, k, w, dout, dv, g=None, gk=None, dht=None, cu_seqlens=None, scale=None, state_v_first=False,
                      output_dh0=False, gates_log2=False):
    _check_rank(q, "q", 4, "[B, T, H, K]")
    _check_rank(dout, "dout", 4, "[B, T, HV, V]")
    B, T, K = q.shape[0], q.shape[1], q.shape[3]
    HV, V = dout.shape[2], dout.shape[3]
    # varlen: the chunk count depends on the offsets' values
    chunks = (T + 63) // 64 if cu_seqlens is None else torch.library.get_ctx().new_dynamic_size()
    n = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    state = (V, K) if state_v_first else (K, V)
    dh0 = q.new_empty((n, HV, *state), dtype=_F32) if output_dh0 else q.new_empty((0,), dtype=_F32)
    return q.new_empty((B, chunks, HV, *state)), dh0, _new(dv)


# gdn_chunk_fwd / gdn_recurrent arguments: q k v beta g gk A_log dt_bias initial_state cu_seqlens, then
# scale state_v_first use_qk_l2norm beta_is_logit [output_final_state keep]; outputs
# (out, final_state[, intermediates]).
_GDN_TENSORS = 10


def _gdn_setup(ctx, inputs, output):
    # gdn_chunk_fwd's intermediates (uint8, so never differentiable), or None where nothing was kept
    kept = output[2] if len(output) > 2 and output[2].numel() > 0 else None
    ctx.save_for_backward(*inputs[:_GDN_TENSORS], kept)
    # Unused outputs' gradients come as None, not zero-filled: above all the intermediates', as
    # large as they are (a 600 MB memset per backward at B4 T8192 H16).
    ctx.set_materialize_grads(False)
    ctx.options = inputs[_GDN_TENSORS:_GDN_TENSORS + 4]
    ctx.n_inputs = len(inputs)
    ctx.returns_final_state = len(inputs) == _GDN_TENSORS + 4 or inputs[_GDN_TENSORS + 4]
    ctx.keep = inputs[_GDN_TENSORS + 5] if kept is not None else 0  # what the intermediates hold


def _gdn_backward(ctx, dout, dfinal_state, *unused):  # unused: intermediates' (no) gradient
    q, k, v, beta, g, gk, A_log, dt_bias, h0, cu_seqlens, kept = ctx.saved_tensors
    if not ctx.returns_final_state:
        dfinal_state = None
    if dout is None:  # only the final state reaches the loss
        dout = q.new_zeros((*q.shape[:2], *v.shape[2:]))
    dq, dk, dv, dbeta, dg, dh0, dA_log, ddt_bias = ops.gdn_chunk_bwd(
        dout, dfinal_state, q, k, v, beta, g, gk, A_log, dt_bias, h0, cu_seqlens, *ctx.options, intermediates=kept, keep=ctx.keep)
    grads = [dq, dk, dv, dbeta,
             dg if g is not None else None,
             dg if gk is not None else None,
             dA_log if A_log is not None else None,
             ddt_bias if dt_bias is not None else None,
             dh0.to(h0.dtype) if h0 is not None else None]
    return (*grads, *([None] * (ctx.n_inputs - len(grads))))


torch.library.register_autograd("attnkit::gdn_chunk_fwd", _gdn_backward, setup_context=_gdn_setup)
torch.library.register_autograd("attnkit::gdn_recurrent", _gdn_backward, setup_context=_gdn_setup)
GdnChunkFunction = _autograd_function("GdnChunkFunction", ops.gdn_chunk_fwd, _gdn_setup, _gdn_backward)
GdnRecurrentFunction = _autograd_function("GdnRecurrentFunction", ops.gdn_recurrent, _gdn_setup, _gdn_backward)


# The backward ops (attention_bwd, flex_bwd, gdn_chunk_bwd) are not differentiable: their autograd
# kernel is torch's not-implemented fallback, registered in C++ (python/csrc/library.cpp).
