"""attnkit.flash_attn_func / flash_attn_varlen_func and torch.ops.attnkit.attention_*: semantics
against a float64 torch reference (CPU backend), gradients (finite differences and the reference's
autograd), the CUDA kernels against the CPU backend, bad arguments."""

import pytest

torch = pytest.importorskip("torch")
import attnkit  # noqa: E402
import torch_refs as ref  # noqa: E402

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device")


def rand(*shape, dtype=torch.float64, device="cpu", seed=None):
    if seed is not None:
        torch.manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, device=device)


MASKS = [
    dict(),
    dict(causal=True),
    dict(causal=True, causal_top_left=True),
    dict(window_size=(5, 3)),
    dict(causal=True, window_size=(7, -1), softcap=3.0),
]


def _ref_kwargs(kw):
    return dict(causal=kw.get("causal", False), top_left=kw.get("causal_top_left", False),
                window=kw.get("window_size", (-1, -1)), softcap=kw.get("softcap", 0.0))


@pytest.mark.parametrize("kw", MASKS)
@pytest.mark.parametrize("sq,sk,hq,hkv", [(17, 33, 4, 2), (33, 17, 3, 3), (1, 65, 8, 1)])
def test_forward_matches_reference(kw, sq, sk, hq, hkv):
    torch.manual_seed(0)
    q, k, v = rand(2, sq, hq, 32), rand(2, sk, hkv, 32), rand(2, sk, hkv, 32)
    out, lse, none = attnkit.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
    want_out, want_lse = ref.attention(q, k, v, **_ref_kwargs(kw))
    assert none is None
    torch.testing.assert_close(out, want_out, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(lse, want_lse.float(), rtol=1e-6, atol=1e-6)  # fp32; -inf rows included


def test_scale_and_empty_rows():
    torch.manual_seed(1)
    q, k, v = rand(1, 9, 2, 16), rand(1, 4, 2, 16), rand(1, 4, 2, 16)
    # top-left causal with a right window of -1 and left window 0: query i sees key i only (i < 4)
    out, lse, _ = attnkit.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True, window_size=(0, -1),
                                          return_attn_probs=True, causal_top_left=True)
    want_out, want_lse = ref.attention(q, k, v, causal=True, top_left=True, window=(0, -1), scale=0.3)
    torch.testing.assert_close(out, want_out)
    assert torch.equal(out[:, 4:], torch.zeros_like(out[:, 4:]))
    assert torch.isinf(lse[..., 4:]).all() and (lse[..., 4:] < 0).all()
    torch.testing.assert_close(lse, want_lse.float())


def test_varlen_matches_per_sequence():
    torch.manual_seed(2)
    lens_q, lens_k = [5, 1, 0, 17], [9, 1, 3, 17]
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32)
    q, k, v = rand(sum(lens_q), 4, 32), rand(sum(lens_k), 2, 32), rand(sum(lens_k), 2, 32)
    out, lse, _ = attnkit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                                 return_attn_probs=True)
    assert lse.shape == (4, sum(lens_q))
    for n in range(len(lens_q)):
        qs, ks = slice(cu_q[n], cu_q[n + 1]), slice(cu_k[n], cu_k[n + 1])
        if lens_q[n] == 0:
            continue
        want_out, want_lse = ref.attention(q[None, qs], k[None, ks], v[None, ks], causal=True)
        torch.testing.assert_close(out[qs], want_out[0])
        torch.testing.assert_close(lse[:, qs], want_lse[0].float())


@pytest.mark.parametrize("kw", [dict(), dict(causal=True, window_size=(4, 2), softcap=2.0)])
def test_gradients_finite_differences(kw):
    torch.manual_seed(3)
    q, k, v = (rand(1, n, h, 8).requires_grad_() for n, h in ((5, 4), (7, 2), (7, 2)))
    assert torch.autograd.gradcheck(lambda a, b, c: attnkit.flash_attn_func(a, b, c, **kw), (q, k, v))


@pytest.mark.parametrize("kw", MASKS[:3])
@pytest.mark.parametrize("gqa_reduction", ["auto", "split"])
def test_gradients_match_reference_autograd(kw, gqa_reduction):
    torch.manual_seed(4)
    q, k, v = rand(2, 17, 4, 32), rand(2, 23, 2, 32), rand(2, 23, 2, 32)
    dout = rand(2, 17, 4, 32)
    got = torch.autograd.grad(attnkit.flash_attn_func(*(t.requires_grad_() for t in (q, k, v)), **kw,
                                                      gqa_reduction=gqa_reduction), (q, k, v), dout)
    want = torch.autograd.grad(ref.attention(q, k, v, **_ref_kwargs(kw))[0], (q, k, v), dout)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)  # measured: agrees to ~2e-7


def test_lse_carries_no_gradient():
    q = rand(1, 4, 2, 8).requires_grad_()
    out, lse, _ = attnkit.flash_attn_func(q, q, q, return_attn_probs=True)
    assert out.requires_grad and not lse.requires_grad


def test_double_backward_is_refused_naming_the_op():
    """The backward ops have no backward of their own: a second-order gradient is an error that
    names the op, never a silent zero (attnkit.gdn / flex alike: python/csrc/library.cpp)."""
    q = rand(1, 4, 2, 8).requires_grad_()
    out = attnkit.flash_attn_func(q, q, q, causal=True)
    (dq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="attnkit::attention_bwd"):
        torch.autograd.grad(dq.sum(), q)


# --- the CUDA kernels against the CPU backend --------------------------------------------------

def _bf16_rule(run, inputs):
    """GPU error <= 2x the CPU backend's own 16-bit error + 1e-3 (both against float64)."""
    want = run(*(t.double().cpu() for t in inputs))
    cpu16 = run(*(t.cpu() for t in inputs))
    gpu = run(*(t.cuda() for t in inputs))
    for w, c, g in zip(want, cpu16, gpu):
        assert torch.isfinite(g).all()
        assert ref.rms_ratio(g.cpu(), w) <= 2 * ref.rms_ratio(c, w) + 1e-3


@needs_cuda
@pytest.mark.parametrize("kw", MASKS)
@pytest.mark.parametrize("d", [64, 128, 256])
def test_cuda_forward_and_backward(kw, d):
    torch.manual_seed(5)
    q, k, v, dout = (rand(2, s, h, d, dtype=torch.bfloat16) for s, h in ((130, 8), (200, 2), (200, 2), (130, 8)))

    def run(q, k, v, dout=dout):
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        out, lse, _ = attnkit.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
        grads = torch.autograd.grad(out, (q, k, v), dout.to(out))
        return (out, lse.masked_fill(torch.isinf(lse), 0), *grads)

    _bf16_rule(run, (q, k, v))


@needs_cuda
def test_cuda_deterministic_is_bitwise_repeatable():
    torch.manual_seed(6)
    q, k, v = (rand(2, 300, h, 128, dtype=torch.bfloat16, device="cuda").requires_grad_() for h in (8, 2, 2))
    grads = [torch.autograd.grad(attnkit.flash_attn_func(q, k, v, causal=True, deterministic=True).sum(), (q, k, v))
             for _ in range(5)]
    for g in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(g, grads[0]))


@needs_cuda
def test_cuda_varlen_and_mixed_devices():
    torch.manual_seed(7)
    cu = torch.tensor([0, 1, 1, 70, 200], dtype=torch.int32)
    q, k, v = (rand(200, h, 64, dtype=torch.bfloat16) for h in (4, 2, 2))
    cpu = attnkit.flash_attn_varlen_func(q, k, v, cu, cu, 130, 130, causal=True)
    gpu = attnkit.flash_attn_varlen_func(q.cuda(), k.cuda(), v.cuda(), cu.cuda(), cu.cuda(), 130, 130, causal=True)
    assert ref.rms_ratio(gpu.cpu(), cpu) < 1e-2
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        attnkit.flash_attn_varlen_func(q.cuda(), k.cuda(), v.cuda(), cu, cu.cuda(), 130, 130)


# --- bad arguments -----------------------------------------------------------------------------

def test_bad_arguments_raise_clear_errors():
    q, k = rand(1, 4, 4, 8), rand(1, 4, 3, 8)
    with pytest.raises(ValueError, match="head count Hq.*multiple of Hkv"):
        attnkit.flash_attn_func(q, k, k)
    with pytest.raises(ValueError, match="k: expected size 8"):
        attnkit.flash_attn_func(q, q[..., :7], q)
    with pytest.raises(ValueError, match="q: expected 4 dims"):
        attnkit.flash_attn_func(q[0], q, q)
    with pytest.raises(NotImplementedError, match="dropout"):
        attnkit.flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="gqa_reduction"):
        attnkit.flash_attn_func(q, q, q, gqa_reduction="fast")
    with pytest.raises(ValueError, match="dtype|int32"):
        cu = torch.tensor([0, 4], dtype=torch.int64)
        attnkit.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4)


@needs_cuda
def test_cuda_graph_capture_and_replay():
    """The ops allocate nothing outside torch's caching allocator and zero their own scratch on the
    current stream: a captured forward + backward replays to the eager result. (The ops are called
    directly: autograd's own stream syncs with tensors made before the capture are not ours.)"""
    torch.manual_seed(8)
    q, k, v = (rand(2, 256, h, 128, dtype=torch.bfloat16, device="cuda") for h in (8, 2, 2))
    dout = rand(2, 256, 8, 128, dtype=torch.bfloat16, device="cuda")
    ops = torch.ops.attnkit

    def step():
        out, lse = ops.attention_fwd(q, k, v, causal=True)
        return (out, lse, *ops.attention_bwd(dout, q, k, v, out, lse, causal=True, deterministic=True))

    eager = step()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm-up on a side stream, as torch's CUDA graph notes ask
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, eager):
        assert torch.equal(a, b)


@needs_cuda
def test_cuda_compile_fullgraph():
    torch.manual_seed(9)
    q, k, v = (rand(2, 300, h, 64, dtype=torch.bfloat16, device="cuda").requires_grad_() for h in (4, 2, 2))

    def f(q, k, v):
        return attnkit.flash_attn_func(q, k, v, causal=True, deterministic=True).float().square().sum()

    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(f, fullgraph=True)(q, k, v), (q, k, v))
    want = torch.autograd.grad(f(q, k, v), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_empty_sides_strided_inputs_and_tensor_max_seqlen():
    torch.manual_seed(10)
    assert attnkit.flash_attn_func(rand(1, 0, 2, 16), rand(1, 5, 2, 16), rand(1, 5, 2, 16)).shape == (1, 0, 2, 16)
    out, lse, _ = attnkit.flash_attn_func(rand(1, 3, 2, 16), rand(1, 0, 2, 16), rand(1, 0, 2, 16),
                                          return_attn_probs=True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()  # no key: 0 and -inf
    x = rand(1, 2, 7, 16).transpose(1, 2)  # [B, S, H, D] view of [B, H, S, D] memory
    torch.testing.assert_close(attnkit.flash_attn_func(x, x, x, causal=True),
                               ref.attention(x, x, x, causal=True)[0])
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    p = rand(5, 2, 16)
    torch.testing.assert_close(attnkit.flash_attn_varlen_func(p, p, p, cu, cu, torch.tensor(3), torch.tensor(3)),
                               attnkit.flash_attn_varlen_func(p, p, p, cu, cu, 3, 3))


def test_packed_variants_match_unpacked_with_gradients():
    torch.manual_seed(11)
    qkv = rand(2, 19, 3, 4, 16).requires_grad_()
    out = attnkit.flash_attn_qkvpacked_func(qkv, causal=True)
    (dqkv,) = torch.autograd.grad(out.sum(), qkv)
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_() for i in range(3))
    want = attnkit.flash_attn_func(q, k, v, causal=True)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(dqkv, torch.stack(torch.autograd.grad(want.sum(), (q, k, v)), dim=2))
    q, kv = rand(2, 7, 4, 16), rand(2, 19, 2, 2, 16)
    torch.testing.assert_close(attnkit.flash_attn_kvpacked_func(q, kv), attnkit.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1]))
    cu = torch.tensor([0, 5, 19], dtype=torch.int32)
    p = rand(19, 3, 4, 16)
    torch.testing.assert_close(attnkit.flash_attn_varlen_qkvpacked_func(p, cu, 14, causal=True),
                               attnkit.flash_attn_varlen_func(p[:, 0], p[:, 1], p[:, 2], cu, cu, 14, 14, causal=True))
    torch.testing.assert_close(attnkit.flash_attn_varlen_kvpacked_func(p[:, 0], p[:, 1:], cu, cu, 14, 14),
                               attnkit.flash_attn_varlen_func(p[:, 0], p[:, 1], p[:, 2], cu, cu, 14, 14))
