"""torch.library.opcheck for every attnkit op, torch.compile(fullgraph=True) with no graph break,
and torch.export + AOTInductor packaging run back through the C++ runner (attnkit-aoti-run)."""

import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.library import opcheck  # noqa: E402

import attnkit  # noqa: E402
from attnkit import flex  # noqa: E402

ops = torch.ops.attnkit
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _attention_args(device, dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, s, h, 64, dtype=dtype, device=device, requires_grad=True) for s, h in
               ((17, 4), (33, 2), (33, 2)))
    return q, k, v


def _gdn_args(device, dtype, T=20):
    torch.manual_seed(1)
    q = torch.randn(2, T, 2, 64, dtype=dtype, device=device)
    k = F.normalize(torch.randn(2, T, 2, 64, device=device), dim=-1).to(dtype)
    v = torch.randn(2, T, 4, 64, dtype=dtype, device=device)
    beta = torch.rand(2, T, 4, dtype=dtype, device=device)
    g = F.logsigmoid(torch.randn(2, T, 4, device=device))
    return q, k, v, beta, g


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_attention(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = _attention_args(device, dtype)
    # deterministic: opcheck compares gradients of repeated runs, fp32 atomics would reorder sums
    opcheck(ops.attention_fwd.default, (q, k, v), dict(causal=True, window_left=8, softcap=3.0, deterministic=True))
    with torch.no_grad():
        out, lse = ops.attention_fwd(q, k, v, causal=True)
    q, k, v = (t.detach() for t in (q, k, v))  # the backward op has no backward of its own
    opcheck(ops.attention_bwd.default, (torch.randn_like(out), q, k, v, out, lse), dict(causal=True, deterministic=True))
    cu = torch.tensor([0, 5, 17], dtype=torch.int32, device=device)
    opcheck(ops.attention_fwd.default, (q[0], k[0][:17], v[0][:17], cu, cu, 12, 12))


def test_opcheck_flex():
    q, k, v = (torch.randn(1, 4, 40, 16, requires_grad=True) for _ in range(3))
    slopes = torch.rand(4)
    from torch.nn.attention.flex_attention import create_block_mask
    bm = create_block_mask(flex.causal(), None, None, 40, 40, device="cpu", BLOCK_SIZE=16)
    blocks = [bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices]
    args = (q, k, v, None, None, slopes, 2.0, True, None, -1, None, None, blocks, 16, 16, False)
    opcheck(ops.flex_fwd.default, args)
    with torch.no_grad():
        out, lse = ops.flex_fwd(*args)
    q, k, v = (t.detach() for t in (q, k, v))
    opcheck(ops.flex_bwd.default, (torch.randn_like(out), q, k, v, out, lse, *args[3:]))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_gdn(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v, beta, g = _gdn_args(device, dtype)
    h0 = torch.randn(2, 4, 64, 64, device=device)
    opcheck(ops.gdn_recurrent.default, (q, k, v, beta, g), dict(initial_state=h0))
    pool = torch.randn(5, 4, 64, 64, device=device)
    idx = torch.tensor([3, 0], dtype=torch.int32, device=device)
    opcheck(ops.gdn_recurrent_.default, (q, k, v, beta, pool, g), dict(state_indices=idx))
    leaves = [t.clone().requires_grad_() for t in (q, k, v, beta, g, h0)]
    kw = dict(initial_state=leaves[5], output_final_state=True)
    opcheck(ops.gdn_chunk_fwd.default, (*leaves[:4], leaves[4]), kw)
    # Keeping the intermediates (CUDA: a uint8 buffer sized by the fake as by the op; CPU: empty).
    # Its bytes are opaque (alignment padding, unused varlen slots are never written), so not the
    # eager-vs-traced output comparison: test_compile_fullgraph_forward_and_backward compares the
    # gradients computed from it instead.
    # keep: 1 T (with the in-op l2norm also the rows' inverse norms), 2 everything.
    for keep, l2 in ((1, False), (1, True), (2, False)):
        opcheck(ops.gdn_chunk_fwd.default, (*leaves[:4], leaves[4]), dict(kw, keep=keep, use_qk_l2norm=l2),
                test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
        with torch.no_grad():
            out, ht, kept = ops.gdn_chunk_fwd(*leaves[:4], leaves[4], **kw, keep=keep, use_qk_l2norm=l2)
        assert kept.dtype == torch.uint8 and (kept.numel() > 0) == (device == "cuda")
        for intermediates in (None, kept):
            opcheck(ops.gdn_chunk_bwd.default, (torch.randn_like(out), torch.randn_like(ht), q, k, v, beta, g),
                    dict(initial_state=h0, intermediates=intermediates, keep=keep if intermediates is not None else 0,
                         use_qk_l2norm=l2))


def test_opcheck_gdn_bwd_dhu():
    q, k, _, _, g = _gdn_args("cpu", torch.float32)
    w, do, dv = torch.randn(2, 20, 4, 64) * 0.1, torch.randn(2, 20, 4, 64), torch.randn(2, 20, 4, 64)
    opcheck(ops.gdn_bwd_dhu.default, (q, k, w, do, dv), dict(g=g.cumsum(1), output_dh0=True))
    opcheck(ops.gdn_bwd_dhu.default, (q, k, w, do, dv), dict(g=g.cumsum(1), gates_log2=True))
    cu = torch.tensor([0, 3, 20], dtype=torch.int64)  # varlen: the chunk count depends on the offsets
    opcheck(ops.gdn_bwd_dhu.default, (q[:1], k[:1], w[:1], do[:1], dv[:1]), dict(cu_seqlens=cu))


class TinyModel(torch.nn.Module):
    """One GQA attention layer and one Gated DeltaNet layer (chunked GDN, fused gate)."""

    def __init__(self, dim=128):
        super().__init__()
        self.wq, self.wk, self.wv = (torch.nn.Linear(dim, n, bias=False) for n in (dim, dim // 2, dim // 2))
        self.wgdn = torch.nn.Linear(dim, 2 * 64 + 2 * 64 + 4 * 64 + 8, bias=False)
        self.A_log = torch.nn.Parameter(torch.zeros(4))
        self.dt_bias = torch.nn.Parameter(torch.zeros(4))

    def forward(self, x):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, 2, 64)
        k = self.wk(x).view(B, T, 1, 64)
        v = self.wv(x).view(B, T, 1, 64)
        a = attnkit.flash_attn_func(q, k, v, causal=True).reshape(B, T, -1)
        qg, kg, vg, gb = self.wgdn(x).split([128, 128, 256, 8], dim=-1)
        qg, kg, vg = qg.view(B, T, 2, 64), kg.view(B, T, 2, 64), vg.view(B, T, 4, 64)
        graw, braw = gb.float().split([4, 4], dim=-1)
        o, state = attnkit.chunk_gated_delta_rule(qg, kg, vg, g=graw, beta=braw.to(x.dtype),
                                                  use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                                  use_gate_in_kernel=True, A_log=self.A_log, dt_bias=self.dt_bias,
                                                  output_final_state=True)
        return a + o.reshape(B, T, -1)[..., :128], state


def _model(device):
    torch.manual_seed(2)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = TinyModel().to(device=device, dtype=dtype)
    model.A_log.data, model.dt_bias.data = model.A_log.data.float(), model.dt_bias.data.float()
    return model, torch.randn(2, 40, 128, device=device, dtype=dtype)


def test_compile_fullgraph_forward_and_backward():
    model, x = _model("cpu")
    x.requires_grad_()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    out_c, state_c = compiled(x)
    out_e, state_e = model(x)
    torch.testing.assert_close(out_c, out_e)
    torch.testing.assert_close(state_c, state_e)
    grads_c = torch.autograd.grad(out_c.sum() + state_c.sum(), [x, *model.parameters()])
    grads_e = torch.autograd.grad(out_e.sum() + state_e.sum(), [x, *model.parameters()])
    for a, b in zip(grads_c, grads_e):
        torch.testing.assert_close(a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compile_keeps_gdn_intermediates_for_the_backward():
    """Compiled, the GDN forward keeps its intermediates (a third op output, saved for the
    backward); eager, the backward reruns the forward's kernels. Without the in-op l2norm both
    compute the same pieces from the same inputs: the same bits, outputs and gradients."""
    q, k, v, beta, g = _gdn_args("cuda", torch.bfloat16, T=150)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, g, beta)]

    def f(q, k, v, g, beta, keep, l2=False):
        return attnkit.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, keep_intermediates=keep,
                                              use_qk_l2norm_in_kernel=l2)

    # Everything kept (compiled) against nothing (eager): the same bits. T kept (with the in-op
    # l2norm also the rows' inverse norms), compiled against eager: the same kernels, the same bits.
    for keep_compiled, keep_eager, l2 in ((True, False, False), ("t", "t", False), ("t", "t", True)):
        torch._dynamo.reset()
        o_c, s_c = torch.compile(lambda *a: f(*a, keep=keep_compiled, l2=l2), fullgraph=True)(*leaves)
        o_e, s_e = f(*leaves, keep=keep_eager, l2=l2)
        assert torch.equal(o_c, o_e) and torch.equal(s_c, s_e)
        do, dht = torch.randn_like(o_e), torch.randn_like(s_e)
        grads_c = torch.autograd.grad((o_c, s_c), leaves, (do, dht))
        grads_e = torch.autograd.grad((o_e, s_e), leaves, (do, dht))
        for a, b in zip(grads_c, grads_e):
            assert torch.equal(a, b), keep_compiled


def test_compile_fullgraph_flex_and_varlen():
    q, k, v = (torch.randn(1, 4, 64, 32) for _ in range(3))
    slopes = torch.rand(4)

    def f(q, k, v):
        out = attnkit.flex_attention(q, k, v, score_mod=flex.alibi(slopes))
        cu = torch.tensor([0, 10, 64], dtype=torch.int32)
        packed = q[0].transpose(0, 1)
        return out, attnkit.flash_attn_varlen_func(packed, packed, packed, cu, cu, 54, 54, causal=True)

    torch._dynamo.reset()
    for a, b in zip(torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v)):
        torch.testing.assert_close(a, b)


def _runner():
    path = os.path.join(os.path.dirname(attnkit.__file__), "attnkit-aoti-run")
    if not os.path.exists(path):
        pytest.fail(f"{path} missing: the package installs the runner beside the op library")
    return path


@pytest.mark.parametrize("device", DEVICES)
def test_export_aoti_package_runs_in_cpp_runner(device, tmp_path):
    model, x = _model(device)
    model.eval()
    with torch.no_grad():
        want = model(x)
    exported = torch.export.export(model, (x,))
    with torch.no_grad():
        for a, b in zip(exported.module()(x), want):
            torch.testing.assert_close(a, b)  # the exported graph runs the same kernels
    package = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "model.pt2"))
    torch.save((x.cpu(),), tmp_path / "inputs.pt")
    run = subprocess.run([_runner(), package, str(tmp_path / "inputs.pt"), str(tmp_path / "outputs.pt")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    got = torch.load(tmp_path / "outputs.pt")
    assert len(got) == len(want)
    # On CUDA, Inductor's Triton code for the gate arithmetic rounds differently from eager's
    # kernels, and the model is bf16: compare at bf16 resolution there.
    tol = dict(rtol=2e-2, atol=2e-2) if device == "cuda" else {}
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b.cpu(), **tol)


def test_fake_outputs_are_contiguous_like_the_real_ones():
    """Inductor trusts the fake strides: a permuted input must not give permuted fake gradients."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    q = torch.randn(1, 2, 9, 16).transpose(1, 2)  # [B, S, H, D] view of [B, H, S, D] memory
    out, lse = ops.attention_fwd(q, q, q)
    real = ops.attention_bwd(out, q, q, q, out, lse)
    with FakeTensorMode() as mode:
        fq = mode.from_tensor(q)
        fout, flse = ops.attention_fwd(fq, fq, fq)
        fake = ops.attention_bwd(fout, fq, fq, fq, fout, flse)
    for r, f in zip((out, lse, *real), (fout, flse, *fake)):
        assert r.stride() == f.stride()
