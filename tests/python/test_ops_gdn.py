"""attnkit.chunk_gated_delta_rule / fused_recurrent_gated_delta_rule (FLA's signatures) and
torch.ops.attnkit.gdn_*: against the float64 token recurrence (spec/gdn.md), gradients by finite
differences and against the recurrence's autograd, the in-place pool decode, the CUDA decode
kernel against the CPU backend, bad arguments."""

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import attnkit  # noqa: E402
import torch_refs as ref  # noqa: E402

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device")


def inputs(B=2, T=20, H=2, HV=4, K=16, V=16, dtype=torch.float64, seed=0, gate="g"):
    torch.manual_seed(seed)
    q, k = torch.randn(B, T, H, K, dtype=dtype), F.normalize(torch.randn(B, T, H, K, dtype=dtype), dim=-1)
    v = torch.randn(B, T, HV, V, dtype=dtype)
    beta = torch.rand(B, T, HV, dtype=dtype)
    g = F.logsigmoid(torch.randn(B, T, HV, dtype=torch.float32)).to(dtype) if gate == "g" else None
    gk = F.logsigmoid(torch.randn(B, T, HV, K, dtype=torch.float32)).to(dtype) if gate == "gk" else None
    return dict(q=q, k=k, v=v, beta=beta, g=g, gk=gk)


CASES = {
    "plain": dict(),
    "state_v_first": dict(initial_state=True, state_v_first=True),
    "l2norm_sigmoid": dict(use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True),
    "fused_gate": dict(use_gate_in_kernel=True, initial_state=True),
    "neg_eigval": dict(use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True),
}


def _call(fn, x, case, cu_seqlens=None):
    """Runs an attnkit function and the reference on the same inputs -> ((o, s), (o_ref, s_ref))."""
    kw = dict(case)
    N = x["q"].shape[0] if cu_seqlens is None else len(cu_seqlens) - 1
    HV, K, V = x["v"].shape[2], x["q"].shape[3], x["v"].shape[3]
    h0 = None
    if kw.pop("initial_state", False):
        torch.manual_seed(9)
        h0 = torch.randn(N, HV, *((V, K) if kw.get("state_v_first") else (K, V)), dtype=torch.float64)
    fused = kw.get("use_gate_in_kernel", False)
    A_log = torch.randn(HV, dtype=torch.float64) * 0.5 if fused else None
    dt_bias = torch.randn(HV, dtype=torch.float64) if fused else None
    extra = dict(A_log=A_log, dt_bias=dt_bias) if fused else {}
    beta = x["beta"]
    if kw.get("use_beta_sigmoid_in_kernel"):
        beta = torch.randn_like(beta)
    args = dict(q=x["q"], k=x["k"], v=x["v"], g=x["g"], beta=beta, initial_state=h0, output_final_state=True,
                cu_seqlens=cu_seqlens, **kw, **extra)
    if x["gk"] is not None:
        args["gk"] = x["gk"]
    got = fn(**args)
    ref_beta = 2 * torch.sigmoid(beta) if kw.get("allow_neg_eigval") else beta
    want = ref.gdn(x["q"], x["k"], x["v"], ref_beta, g=x["g"], gk=x["gk"], A_log=A_log, dt_bias=dt_bias,
                   initial_state=h0, cu_seqlens=cu_seqlens, state_v_first=kw.get("state_v_first", False),
                   use_qk_l2norm=kw.get("use_qk_l2norm_in_kernel", False),
                   beta_is_logit=kw.get("use_beta_sigmoid_in_kernel", False) and not kw.get("allow_neg_eigval"))
    return got, want


@pytest.mark.parametrize("fn", [attnkit.chunk_gated_delta_rule, attnkit.fused_recurrent_gated_delta_rule])
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_matches_token_recurrence(fn, case):
    (o, s), (o_ref, s_ref) = _call(fn, inputs(T=70 if fn is attnkit.chunk_gated_delta_rule else 20), CASES[case])
    torch.testing.assert_close(o, o_ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(s.double(), s_ref, rtol=1e-5, atol=1e-5)


def test_per_key_gate_and_varlen():
    x = inputs(B=1, T=80, gate="gk")
    cu = torch.tensor([0, 1, 65, 66, 80], dtype=torch.int64)
    for fn in (attnkit.chunk_gated_delta_rule, attnkit.fused_recurrent_gated_delta_rule):
        (o, s), (o_ref, s_ref) = _call(fn, x, dict(initial_state=True), cu_seqlens=cu)
        torch.testing.assert_close(o, o_ref, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(s.double(), s_ref, rtol=1e-5, atol=1e-5)


def test_no_final_state_unless_asked():
    x = inputs()
    o, s = attnkit.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"])
    assert s is None and o.shape == (2, 20, 4, 16)


@pytest.mark.parametrize("fn", [attnkit.chunk_gated_delta_rule, attnkit.fused_recurrent_gated_delta_rule])
def test_gradients_finite_differences(fn):
    x = inputs(B=1, T=9, H=1, HV=2, K=4, V=4)
    # the recurrent op keeps its state in fp32 (the decode contract), too coarse for finite
    # differences through h0: its dh0 is checked against the chunked op's instead
    h0 = torch.randn(1, 2, 4, 4, dtype=torch.float64) if fn is attnkit.chunk_gated_delta_rule else None
    leaves = [x["q"], x["k"], x["v"], x["g"], x["beta"]] + ([h0] if h0 is not None else [])

    # o only: the final state is fp32 by contract, too coarse for finite differences; its gradient
    # is checked against the recurrence's autograd below.
    def run(q, k, v, g, beta, h0=None):
        return fn(q, k, v, g=g, beta=beta, initial_state=h0)[0]

    assert torch.autograd.gradcheck(run, [t.clone().requires_grad_() for t in leaves])


def test_gradient_through_the_final_state_alone():
    """Only the final state reaches the loss: the output's gradient comes as None (no zero-filled
    tensors are materialised) and is taken as zero."""
    x = inputs()
    leaves = [t.clone().requires_grad_() for t in (x["q"], x["k"], x["v"], x["g"], x["beta"])]
    o, s = attnkit.chunk_gated_delta_rule(*leaves, output_final_state=True)
    alone = torch.autograd.grad(s.sum(), leaves)
    o, s = attnkit.chunk_gated_delta_rule(*leaves, output_final_state=True)
    explicit = torch.autograd.grad((o, s), leaves, (torch.zeros_like(o), torch.ones_like(s)))
    for a, b in zip(alone, explicit):
        assert torch.equal(a, b)


def test_recurrent_gradients_match_chunked():
    x = inputs(T=12)
    h0 = torch.randn(2, 4, 16, 16, dtype=torch.float64)
    grads = []
    for fn in (attnkit.chunk_gated_delta_rule, attnkit.fused_recurrent_gated_delta_rule):
        leaves = [t.clone().requires_grad_() for t in (x["q"], x["k"], x["v"], x["g"], x["beta"], h0)]
        o, s = fn(*leaves[:3], g=leaves[3], beta=leaves[4], initial_state=leaves[5], output_final_state=True)
        grads.append(torch.autograd.grad((o.sum() + s.sum()), leaves))
    for name, a, b in zip("q k v g beta h0".split(), *grads):
        assert ref.rms_ratio(b, a) < 1e-5, name


@pytest.mark.parametrize("case", ["plain", "fused_gate", "l2norm_sigmoid"])
def test_gradients_match_recurrence_autograd(case):
    x = inputs(T=70)
    leaves = {n: x[n].clone().requires_grad_() for n in ("q", "k", "v", "g", "beta")}
    x_grad = dict(x, **leaves)
    (o, s), (o_ref, s_ref) = _call(attnkit.chunk_gated_delta_rule, x_grad, CASES[case])
    torch.manual_seed(3)
    do, ds = torch.randn_like(o_ref), torch.randn_like(s_ref)
    got = torch.autograd.grad((o, s), list(leaves.values()), (do, ds.to(s)), allow_unused=True)
    want = torch.autograd.grad((o_ref, s_ref), list(leaves.values()), (do, ds), allow_unused=True)
    for name, g, w in zip(leaves, got, want):  # (with beta logits, _call makes its own beta: both None)
        assert (g is None) == (w is None), name
        if w is not None:
            assert ref.rms_ratio(g, w) < 1e-6, name


def test_inplace_pool_decode_matches_functional():
    x = inputs(B=3, T=2)
    pool = torch.randn(5, 4, 16, 16, dtype=torch.float32)
    idx = torch.tensor([4, -1, 1], dtype=torch.int32)
    before = pool.clone()
    o = attnkit.fused_recurrent_gated_delta_rule_update_(x["q"], x["k"], x["v"], pool, g=x["g"], beta=x["beta"],
                                                         state_indices=idx)
    o_ref, s_ref = attnkit.fused_recurrent_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], beta=x["beta"],
                                                            initial_state=before[[4, 0, 1]], output_final_state=True)
    torch.testing.assert_close(o[[0, 2]], o_ref[[0, 2]])
    assert torch.equal(o[1], torch.zeros_like(o[1]))  # a padding slot gives 0 and leaves the pool alone
    torch.testing.assert_close(pool[[4, 1]], s_ref[[0, 2]])
    assert torch.equal(pool[[0, 2, 3]], before[[0, 2, 3]])


@needs_cuda
@pytest.mark.parametrize("K", [64, 128])
def test_cuda_decode_matches_cpu(K):
    x = inputs(B=3, T=4, H=2, HV=4, K=K, V=K, dtype=torch.bfloat16)
    h0 = torch.randn(3, 4, K, K)
    cpu = attnkit.fused_recurrent_gated_delta_rule(x["q"], x["k"], x["v"], x["g"].float(), beta=x["beta"],
                                                   initial_state=h0, output_final_state=True)
    gpu = attnkit.fused_recurrent_gated_delta_rule(*(t.cuda() for t in (x["q"], x["k"], x["v"], x["g"].float())),
                                                   beta=x["beta"].cuda(), initial_state=h0.cuda(),
                                                   output_final_state=True)
    for c, g in zip(cpu, gpu):
        assert ref.rms_ratio(g.cpu(), c) < 5e-3


@needs_cuda
@pytest.mark.parametrize("K", [64, 128])
def test_cuda_chunk_forward_matches_cpu(K):
    x = inputs(B=2, T=150, H=2, HV=4, K=K, V=K, dtype=torch.bfloat16)
    h0 = torch.randn(2, 4, K, K)
    kw = dict(initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    cpu = attnkit.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"].float(), x["beta"], **kw)
    kw["initial_state"] = h0.cuda()
    gpu = attnkit.chunk_gated_delta_rule(*(t.cuda() for t in (x["q"], x["k"], x["v"], x["g"].float(), x["beta"])), **kw)
    for c, g in zip(cpu, gpu):
        assert ref.rms_ratio(g.cpu(), c) < 5e-3


@needs_cuda
def test_cuda_chunk_varlen_matches_cpu():
    x = inputs(B=1, T=200, H=1, HV=2, K=64, V=64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 1, 1, 70, 200])
    cpu = attnkit.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"].float(), x["beta"], cu_seqlens=cu,
                                         output_final_state=True)
    gpu = attnkit.chunk_gated_delta_rule(*(t.cuda() for t in (x["q"], x["k"], x["v"], x["g"].float(), x["beta"])),
                                         cu_seqlens=cu.cuda(), output_final_state=True)
    for c, g in zip(cpu, gpu):
        assert ref.rms_ratio(g.cpu(), c) < 5e-3


@needs_cuda
@pytest.mark.parametrize("K,options,varlen", [
    (64, {}, False),
    (128, dict(use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True), False),
    (128, dict(use_gate_in_kernel=True, state_v_first=True), False),
    (64, dict(use_qk_l2norm_in_kernel=True), True),
], ids=["plain-64", "l2norm-sigmoid-128", "fused-gate-vfirst-128", "varlen-64"])
def test_cuda_chunk_backward_matches_cpu(K, options, varlen):
    """Autograd through the CUDA op (bf16) against the CPU op in float64 on the same rounded inputs,
    with FLA's gradient tolerances (spec/gdn.md): 0.008 on dq, dk, dv, dh0; 0.02 on dbeta, dg."""
    B, T = (1, 200) if varlen else (2, 150)
    x = inputs(B=B, T=T, H=2, HV=4, K=K, V=K, dtype=torch.bfloat16)
    cu = torch.tensor([0, 1, 1, 70, 200]) if varlen else None
    N = B if cu is None else len(cu) - 1
    torch.manual_seed(4)
    vfirst = options.get("state_v_first", False)
    leaves = dict(q=x["q"], k=x["k"], v=x["v"], g=x["g"].float(), beta=x["beta"], h0=torch.randn(N, 4, K, K))
    if options.get("use_beta_sigmoid_in_kernel"):
        leaves["beta"] = torch.randn_like(x["beta"])
    extra = {}
    if options.get("use_gate_in_kernel"):
        leaves["g"] = torch.randn_like(leaves["g"])
        extra = dict(A_log=torch.randn(4) * 0.5, dt_bias=torch.randn(4))
    o_shape = (B, T, 4, K)
    do, dht = torch.randn(o_shape), torch.randn(N, 4, K, K)

    def grads(device, dtype, **keep):  # keep: keep_intermediates=..., or nothing for the default
        ls = {n: (t.to(dtype) if t.dtype == torch.bfloat16 else t.double() if dtype == torch.float64 else t)
              .to(device).requires_grad_() for n, t in leaves.items()}
        ex = {n: (t.double() if dtype == torch.float64 else t).to(device).requires_grad_() for n, t in extra.items()}
        o, s = attnkit.chunk_gated_delta_rule(ls["q"], ls["k"], ls["v"], ls["g"], ls["beta"], initial_state=ls["h0"],
                                              output_final_state=True, cu_seqlens=None if cu is None else cu.to(device),
                                              **keep, **options, **ex)
        wrt = list(ls.values()) + list(ex.values())
        gs = torch.autograd.grad((o, s), wrt, (do.to(o), dht.to(s)))
        return dict(zip(list(ls) + list(ex), (g.double().cpu() for g in gs)))

    want = grads("cpu", torch.float64)
    got = grads("cuda", torch.bfloat16, keep_intermediates=False)  # the backward reruns the forward's kernels
    kept = grads("cuda", torch.bfloat16, keep_intermediates=True)  # ... reads all the forward's intermediates
    kept_t = grads("cuda", torch.bfloat16, keep_intermediates="t")  # ... forms w and u from the forward's T
    default = grads("cuda", torch.bfloat16)  # "auto": nothing kept at these few chains (test below: many)
    tol = dict(q=0.008, k=0.008, v=0.008, h0=0.008, beta=0.02, g=0.02, A_log=0.02, dt_bias=0.02)
    for name, w in want.items():
        for result in (got, kept, kept_t):
            assert torch.isfinite(result[name]).all(), name
            assert ref.rms_ratio(result[name], w) < tol[name], name
        # Without the in-op l2norm the rerun sees the very inputs the forward saw: the same bits.
        if not options.get("use_qk_l2norm_in_kernel"):
            assert torch.equal(kept[name], got[name]), name
        assert torch.equal(default[name], got[name]), name  # the backward is deterministic


def test_auto_keep_rule():
    """keep_intermediates="auto" keeps T exactly where the backward's rerun forms w and u from it in
    the recurrence kernel: K = V = 128 and 96+ (sequence, value head, 64-column block) chains."""
    def code(B, HV, K, cu=None):
        q = torch.empty(B, 64, 2, K, device="meta")
        v = torch.empty(B, 64, HV, K, device="meta")
        return attnkit.gdn._keep_code("auto", q, v, cu)
    assert code(4, 16, 128) == 1   # issue 6's B4 case: 128 chains
    assert code(3, 16, 128) == 1   # 96
    assert code(1, 32, 128) == 0   # 64: few chains, T bought nothing
    assert code(4, 16, 64) == 0    # K = 64: no recurrence-formed w, u
    assert code(1, 64, 128, torch.zeros(21, dtype=torch.int64)) == 1  # varlen: 20 sequences x 64 heads
    assert code(1, 16, 128, torch.zeros(3, dtype=torch.int64)) == 0   # 2 sequences x 16 heads
    q = torch.empty(2, 64, 128, device="meta")  # malformed: left to the op's own error
    assert attnkit.gdn._keep_code("auto", q, q, None) == 0
    assert [attnkit.gdn._keep_code(k, q, q, None) for k in (False, None, "t", True, "all")] == [0, 0, 1, 2, 2]


@needs_cuda
def test_cuda_default_keeps_t_with_many_chains():
    """At 96+ chains the default keeps T: the same bits as keep_intermediates="t" (the op is
    deterministic), within T's rounding of keeping nothing."""
    torch.manual_seed(5)
    x = inputs(B=2, T=70, H=4, HV=48, K=128, V=128, dtype=torch.bfloat16)  # 2 x 48 x 2 = 192 chains
    cuda = {n: x[n].cuda() for n in ("q", "k", "v", "g", "beta")}

    def grads(**keep):
        ls = [cuda[n].clone().float().requires_grad_() if n == "g" else cuda[n].clone().requires_grad_()
              for n in ("q", "k", "v", "g", "beta")]
        o, _ = attnkit.chunk_gated_delta_rule(*ls, use_qk_l2norm_in_kernel=True, **keep)
        return torch.autograd.grad(o, ls, torch.ones_like(o))

    default, t, nothing = grads(), grads(keep_intermediates="t"), grads(keep_intermediates=False)
    for a, b, c in zip(default, t, nothing):
        assert torch.equal(a, b)
        assert torch.isfinite(a).all() and ref.rms_ratio(a.double().cpu(), c.double().cpu()) < 5e-3


def test_bad_arguments_raise_clear_errors():
    x = inputs()
    with pytest.raises(ValueError, match="beta"):
        attnkit.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"][:, :5])
    with pytest.raises(ValueError, match="q: varlen .* expects B == 1"):
        attnkit.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"],
                                       cu_seqlens=torch.tensor([0, 20], dtype=torch.int64))
    with pytest.raises(ValueError, match="A_log"):
        attnkit.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], use_gate_in_kernel=True)
    with pytest.raises(NotImplementedError, match="gv"):
        attnkit.fused_recurrent_gated_delta_rule(x["q"], x["k"], x["v"], gv=x["v"])
    with pytest.raises(TypeError, match="unexpected keyword"):
        attnkit.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], head_first=True)
    with pytest.raises(ValueError, match="keep_intermediates: expected"):
        attnkit.chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], keep_intermediates="w")


def in_chunk_cumsum(step, starts):
    """[B, T, ...] per-token log-decays -> their cumulative sums over dim 1, restarting at every
    64-token chunk of every sequence (sequence starts `starts`), as FLA's chunk_local_cumsum."""
    T = step.shape[1]
    G = torch.zeros_like(step)
    chunk_starts = sorted({c for s, e in zip(starts, (starts[1:] + [T])) for c in range(s, e, 64)})
    for c0, c1 in zip(chunk_starts, chunk_starts[1:] + [T]):
        G[:, c0:c1] = step[:, c0:c1].cumsum(1)
    return G


@pytest.mark.parametrize("gate", [None, "g", "gk"])
@pytest.mark.parametrize("varlen", [False, True])
def test_bwd_dhu_matches_reference_with_fla_base2_gates(gate, varlen):
    """attnkit.chunk_gated_delta_rule_bwd_dhu takes FLA's base-2 cumulative gates; the reference
    (attnkit/gdn.hpp's formulas) the natural-log ones."""
    torch.manual_seed(5)
    B, T, H, HV, K, V = (1, 150, 2, 4, 16, 8) if varlen else (2, 150, 2, 4, 16, 8)
    cu = torch.tensor([0, 1, 70, 150], dtype=torch.int64) if varlen else None
    q, k = torch.randn(B, T, H, K), F.normalize(torch.randn(B, T, H, K), dim=-1)
    w, do, dv = torch.randn(B, T, HV, K) * 0.1, torch.randn(B, T, HV, V), torch.randn(B, T, HV, V)
    dht = torch.randn(B if cu is None else 3, HV, K, V)
    step = F.logsigmoid(torch.randn(B, T, HV, *((K,) if gate == "gk" else ())))
    starts = [0, 1, 70] if varlen else [0]
    G = in_chunk_cumsum(step, starts)
    g = G if gate == "g" else None
    gk = G if gate == "gk" else None
    ln2 = math.log(2.0)
    dh, dh0, dv2 = attnkit.chunk_gated_delta_rule_bwd_dhu(
        q, k, w, do, dv, g=None if g is None else g / ln2, gk=None if gk is None else gk / ln2,
        h0=torch.zeros_like(dht), dht=dht, cu_seqlens=cu)
    want_dh, want_dh0, want_dv2 = ref.bwd_dhu(q, k, w, do, dv, g=g, gk=gk, dht=dht, cu_seqlens=cu)
    assert dh.shape == want_dh.shape
    for got, want in ((dh, want_dh), (dh0, want_dh0), (dv2, want_dv2)):
        assert ref.rms_ratio(got, want) < 1e-5


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("gate", ["g", "gk"])
def test_bwd_dhu_op_gates_log2(device, gate):
    """torch.ops.attnkit.gdn_bwd_dhu(gates_log2=True) on base-2 gates gives what the op gives on
    the natural-log gates they encode, and the flag is read (the base-2 values taken as natural
    logs give something else)."""
    torch.manual_seed(7)
    B, T, H, HV, K, V = 1, 130, 2, 2, 64, 64
    dt = torch.float32 if device == "cpu" else torch.bfloat16
    q = torch.randn(B, T, H, K).to(device, dt)
    k = F.normalize(torch.randn(B, T, H, K), dim=-1).to(device, dt)
    w = (k.float() * torch.rand(B, T, HV, 1, device=device)).to(dt)
    do, dv = torch.randn(B, T, HV, V).to(device, dt), torch.randn(B, T, HV, V).to(device, dt)
    dht = torch.randn(B, HV, K, V, device=device)
    step = F.logsigmoid(torch.randn(B, T, HV, *((K,) if gate == "gk" else ()))) * 0.5
    G = in_chunk_cumsum(step, [0]).to(device)
    run = lambda G, log2: torch.ops.attnkit.gdn_bwd_dhu(  # noqa: E731
        q, k, w, do, dv, **{gate: G}, dht=dht, output_dh0=True, gates_log2=log2)
    want, got, misread = run(G, False), run(G / math.log(2.0), True), run(G / math.log(2.0), False)
    for a, b in zip(got, want):
        assert torch.isfinite(a).all()
        assert ref.rms_ratio(a.double().cpu(), b.double().cpu()) < (1e-5 if device == "cpu" else 1e-3)
    assert ref.rms_ratio(misread[0].double().cpu(), want[0].double().cpu()) > 1e-2


@needs_cuda
@pytest.mark.parametrize("gate", [None, "g", "gk"])
@pytest.mark.parametrize("varlen", [False, True])
def test_cuda_bwd_dhu_matches_reference(gate, varlen):
    """The CUDA bwd_dhu against the float64 reference on the same bf16 values (FLA's metric and
    gradient tolerance); unit keys and w = beta * k keep the reverse pass contractive, as the real
    WY w does."""
    torch.manual_seed(6)
    B, T, H, HV, K, V = (1, 300, 2, 4, 128, 128) if varlen else (2, 300, 2, 4, 128, 128)
    cu = torch.tensor([0, 1, 130, 300], dtype=torch.int64) if varlen else None
    starts = [0, 1, 130] if varlen else [0]
    q = torch.randn(B, T, H, K).bfloat16()
    k = F.normalize(torch.randn(B, T, H, K), dim=-1).bfloat16()
    w = (k.float().repeat_interleave(HV // H, dim=2) * torch.rand(B, T, HV, 1)).bfloat16()
    do, dv = torch.randn(B, T, HV, V).bfloat16(), torch.randn(B, T, HV, V).bfloat16()
    dht = torch.randn(B if cu is None else 3, HV, K, V)
    step = F.logsigmoid(torch.randn(B, T, HV, *((K,) if gate == "gk" else ()))) * 0.1
    G = in_chunk_cumsum(step, starts)
    g = G if gate == "g" else None
    gk = G if gate == "gk" else None
    ln2 = math.log(2.0)
    dev = lambda t: None if t is None else t.cuda()  # noqa: E731
    dh, dh0, dv2 = attnkit.chunk_gated_delta_rule_bwd_dhu(
        *(t.cuda() for t in (q, k, w, do, dv)), g=dev(None if g is None else g / ln2),
        gk=dev(None if gk is None else gk / ln2), h0=dht.cuda(), dht=dht.cuda(), cu_seqlens=dev(cu))
    want_dh, want_dh0, want_dv2 = ref.bwd_dhu(*(t.double() for t in (q, k, w, do, dv)),
                                              g=None if g is None else g.double(),
                                              gk=None if gk is None else gk.double(), dht=dht.double(), cu_seqlens=cu)
    assert dh.dtype == torch.bfloat16 and dh0.dtype == torch.float32 and dh.shape == want_dh.shape
    for got, want in ((dh, want_dh), (dh0, want_dh0), (dv2, want_dv2)):
        assert torch.isfinite(got).all()
        assert ref.rms_ratio(got.cpu().double(), want) < 0.008
