"""attnkit.flex_attention (torch's flex_attention signature, attnkit.flex catalog mods, torch
BlockMasks): the forward against torch's own flex_attention on the same mods and masks, gradients
against a dense float64 reference built from the same mod objects (torch's flex has no CPU
backward)."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")
from torch.nn.attention.flex_attention import create_block_mask  # noqa: E402
from torch.nn.attention.flex_attention import flex_attention as torch_flex  # noqa: E402

import attnkit  # noqa: E402
from attnkit import flex  # noqa: E402

CUDA = torch.cuda.is_available()
B, HQ, HKV, S, D = 2, 4, 2, 150, 32


def _qkv(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return (torch.randn(B, HQ, S, D, dtype=dtype), torch.randn(B, HKV, S, D, dtype=dtype),
            torch.randn(B, HKV, S, D, dtype=dtype))


def _catalog():
    torch.manual_seed(1)
    docs = torch.cumsum(torch.rand(B, S) < 0.03, dim=1).to(torch.int32)
    return {
        "none": (None, None),
        "causal": (None, flex.causal()),
        "sliding_window_causal": (None, flex.and_masks(flex.causal(), flex.sliding_window(40))),
        "prefix_lm": (None, flex.prefix_lm(torch.tensor([10, 70], dtype=torch.int32))),
        "document": (None, flex.document_mask(docs)),
        "alibi_causal": (flex.alibi(torch.rand(HQ, dtype=torch.float64)), flex.causal()),
        "softcap": (flex.softcap(2.0), None),
        "rel_bias_alibi_softcap": (flex.compose_scores(flex.relative_position_bias(torch.randn(HQ, 2 * S - 1)),
                                                       flex.alibi(torch.rand(HQ)), flex.softcap(5.0)), None),
    }


CATALOG = _catalog()


def dense_reference(q, k, v, score_mod, mask_mod, scale=None):
    """Full score matrix with the mods applied on broadcast index grids, then softmax."""
    k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    b, h, i, j = (torch.arange(n).view([-1 if d == a else 1 for a in range(4)])
                  for d, n in enumerate((q.shape[0], q.shape[1], q.shape[2], k.shape[2])))
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if score_mod is not None:
        s = score_mod(s, b, h, i, j)
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(b, h, i, j), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


TORCH_FLEX_CANNOT = set()  # cases torch's own flex cannot run (none now)


@pytest.mark.parametrize("name", list(CATALOG))
def test_matches_torch_flex_forward_and_backward(name):
    score_mod, mask_mod = CATALOG[name]
    block_mask = create_block_mask(mask_mod, B, None, S, S, device="cpu") if mask_mod is not None else None
    q, k, v = (t.requires_grad_() for t in _qkv())
    out, lse = attnkit.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True,
                                      return_lse=True)
    if name not in TORCH_FLEX_CANNOT:
        want_out, want_lse = torch_flex(q.detach(), k.detach(), v.detach(), score_mod=score_mod,
                                        block_mask=block_mask, enable_gqa=True, return_lse=True)
        torch.testing.assert_close(out.detach(), want_out, rtol=1e-7, atol=1e-7)
        torch.testing.assert_close(lse, want_lse.float(), rtol=1e-5, atol=1e-5)
    dense = dense_reference(q, k, v, score_mod, mask_mod)
    torch.testing.assert_close(out.detach(), dense.detach(), rtol=1e-7, atol=1e-7)
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    want = torch.autograd.grad(dense, (q, k, v), dout)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_catalog_mods_are_torch_mods():
    """The same objects run under torch's flex (above); and_masks refuses a doubled field."""
    with pytest.raises(ValueError, match="given twice"):
        flex.and_masks(flex.sliding_window(3), flex.sliding_window(4))
    with pytest.raises(ValueError, match="order"):
        flex.compose_scores(flex.softcap(2.0), flex.alibi(torch.rand(HQ)))


def test_unknown_mods_and_mismatched_masks_raise():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="score_mod must be an attnkit.flex"):
        attnkit.flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: s, enable_gqa=True)
    block_mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, S, S, device="cpu")
    with pytest.raises(TypeError, match="mask_mod must be an attnkit.flex"):
        attnkit.flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa"):
        attnkit.flex_attention(q, k, v)
    small = create_block_mask(flex.causal(), None, None, 64, 64, device="cpu")
    with pytest.raises(ValueError, match="block_mask was built for"):
        attnkit.flex_attention(q, k, v, block_mask=small, enable_gqa=True)


@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("name", list(CATALOG))
def test_cuda_forward_matches_float64_within_torch_flex_error(name):
    """The Hopper forward (bf16, D = 64) against a float64 dense reference: its error at most twice
    torch flex's own bf16 error on the same inputs, plus a small absolute term."""
    score_mod, mask_mod = CATALOG[name]
    score_mod, mask_mod = moved(score_mod, "cuda"), moved(mask_mod, "cuda")
    torch.manual_seed(3)
    q, k, v = (torch.randn(B, h, S, 64, device="cuda").bfloat16() for h in (HQ, HKV, HKV))
    block_mask = create_block_mask(mask_mod, B, None, S, S, device="cuda") if mask_mod is not None else None
    _, lse = cuda_forward_within_torch_flex_error(q, k, v, score_mod, mask_mod, block_mask)
    assert torch.isfinite(lse[lse > -float("inf")]).all()


@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("sq", [1, 17])
@pytest.mark.parametrize("mods", ["none", "alibi", "alibi_window_blockmask"])
def test_cuda_short_queries_split_kv_within_torch_flex_error(sq, mods):
    """Short queries against long keys take the split-KV path (keys over CTAs, then a combine);
    the same error rule as the full path, against float64."""
    sk = 3000
    torch.manual_seed(4)
    q = torch.randn(B, HQ, sq, 64, device="cuda").bfloat16()
    k, v = (torch.randn(B, HKV, sk, 64, device="cuda").bfloat16() for _ in range(2))
    score_mod = flex.alibi(torch.rand(HQ, device="cuda")) if mods != "none" else None
    mask_mod = flex.sliding_window(1000) if mods == "alibi_window_blockmask" else None
    block_mask = create_block_mask(mask_mod, B, None, sq, sk, device="cuda") if mask_mod is not None else None
    _, lse = cuda_forward_within_torch_flex_error(q, k, v, score_mod, mask_mod, block_mask)
    assert torch.isfinite(lse).all()  # every query sees keys


def cuda_forward_within_torch_flex_error(q, k, v, score_mod, mask_mod, block_mask):
    """attnkit's CUDA forward against a float64 dense reference: finite outputs, and an error at most
    twice torch flex's own on the same bf16 inputs plus 1e-3. Returns (out, lse)."""
    out, lse = attnkit.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True,
                                      return_lse=True)
    want = dense_reference(*(t.double().cpu() for t in (q, k, v)), moved(score_mod, "cpu"), moved(mask_mod, "cpu"))
    theirs = torch_flex(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True)
    err = (out.double().cpu() - want).abs().max().item()
    torch_err = (theirs.double().cpu() - want).abs().max().item()
    assert torch.isfinite(out).all()
    assert err <= 2 * torch_err + 1e-3, (err, torch_err)
    return out, lse


def moved(m, device):
    """A catalog mod with its tensors on `device` (None stays None)."""
    if m is None:
        return None
    return dataclasses.replace(m, **{f.name: getattr(m, f.name).to(device) for f in dataclasses.fields(m)
                                     if isinstance(getattr(m, f.name), torch.Tensor)})


@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("name", list(CATALOG))
def test_cuda_backward_matches_float64_within_torch_flex_error(name):
    """The Hopper backward (bf16, D = 64, GQA 2) through autograd against the gradients of a float64
    dense reference: per gradient, an error at most twice torch flex's own bf16 backward's on the
    same inputs, plus 1e-3 of the gradient's scale."""
    cuda_forward_and_backward_within_torch_flex_error(name, seed=5)


@pytest.mark.skipif(not CUDA, reason="no CUDA device")
@pytest.mark.parametrize("scale", [-2.0, 0.0])
@pytest.mark.parametrize("name", ["none", "causal", "alibi_causal", "softcap"])
def test_cuda_nonpositive_scale_within_torch_flex_error(name, scale):
    """Scales <= 0 (torch's flex takes any float): with -2 a row's scaled scores span far more than
    exp2's range below the row max's, so a running max taken of unscaled scores would overflow; 0 is
    uniform attention. Forward and backward against float64, the backward's error rule."""
    cuda_forward_and_backward_within_torch_flex_error(name, seed=6, scale=scale)


def cuda_forward_and_backward_within_torch_flex_error(name, seed, scale=None):
    """CATALOG[name] on CUDA (bf16, D = 64, GQA 2) through autograd: the output and dq, dk, dv each
    finite, with an error against a float64 dense reference at most twice torch flex's own on the
    same inputs plus 1e-3 of the reference's scale."""
    score_mod, mask_mod = CATALOG[name]
    score_mod, mask_mod = moved(score_mod, "cuda"), moved(mask_mod, "cuda")
    torch.manual_seed(seed)
    q, k, v = (torch.randn(B, h, S, 64, device="cuda").bfloat16() for h in (HQ, HKV, HKV))
    dout = torch.randn(B, HQ, S, 64, device="cuda").bfloat16()
    block_mask = create_block_mask(mask_mod, B, None, S, S, device="cuda") if mask_mod is not None else None

    def run(fn, *inputs):
        inputs = [t.detach().requires_grad_() for t in inputs]
        out = fn(*inputs)
        out.backward(dout.to(inputs[0]))
        return [out.detach()] + [t.grad for t in inputs]

    ours = run(lambda *t: attnkit.flex_attention(*t, score_mod=score_mod, block_mask=block_mask, scale=scale,
                                                 enable_gqa=True), q, k, v)
    theirs = run(lambda *t: torch_flex(*t, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=True),
                 q, k, v)
    want = run(lambda *t: dense_reference(*t, moved(score_mod, "cpu"), moved(mask_mod, "cpu"), scale=scale),
               *(t.double().cpu() for t in (q, k, v)))
    for what, o, t, w in zip(("out", "dq", "dk", "dv"), ours, theirs, want):
        assert torch.isfinite(o).all(), what
        err = (o.double().cpu() - w).abs().max().item()
        torch_err = (t.double().cpu() - w).abs().max().item()
        assert err <= 2 * torch_err + 1e-3 * max(1.0, w.abs().max().item()), (what, err, torch_err)
