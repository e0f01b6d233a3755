"""bench/bench_gdn_decode.py — attnkit's gated delta rule decode beside flash-linear-attention's
fused_recurrent_gated_delta_rule in one process (one token per sequence, K = V = 128, fp32 state).

    python3 bench/bench_gdn_decode.py [--lib build-device/tools/libattnkit_c.so] [--out DIR]

FLA comes from wheels carried to the GPU machine (scripts/device/run.sh installs them in /tmp/site).
Reported: state traffic (read + write of the fp32 state) per second, against the device-copy
ceiling measured in the same run; the bar is 80% of that ceiling. Each side is timed two ways:
do_bench per call (each call between its own events, behind do_bench's L2 flush), and "layers":
a CUDA graph of 10 calls on 10 different states (a serving engine's decode step: one call a layer,
captured in a graph), timed per call, which leaves out the per-call event and launch gaps.
"""
import argparse, ctypes, datetime, json, os, sys

sys.path.insert(0, os.environ.get("FLA_SRC", "/tmp/site"))
import torch
import torch.nn.functional as F
from triton.testing import do_bench


LAYERS = 10


def layers_ms(call):
    """Median ms a call of call(i), i = 0 .. LAYERS-1 (each on its own state) captured in one CUDA graph."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture
            for i in range(LAYERS):
                call(i)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(LAYERS):
                call(i)
        return do_bench(graph.replay, warmup=10, rep=200, return_mode="median") / LAYERS
    except Exception as e:
        print(f"  (no CUDA graph: {type(e).__name__}: {str(e)[:200]})")
        return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-device/tools/libattnkit_c.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    args = ap.parse_args()
    lib = ctypes.CDLL(args.lib)
    fn = lib.attnkit_c_gdn_decode
    P, I64, I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    fn.argtypes = [P] * 7 + [I64] * 5 + [I, I, P, ctypes.c_char_p, I]  # ptrs, N T H HV D, dtype l2norm stream err len
    fn.restype = I
    err = ctypes.create_string_buffer(512)
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    dev = "cuda"
    meta = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=datetime.date.today().isoformat())
    x = torch.empty(2 * 1024**3 // 2, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    copy_ms = do_bench(lambda: y.copy_(x), warmup=50, rep=300, return_mode="median")
    copy_tbps = 2 * x.numel() * 2 / copy_ms / 1e9
    del x, y
    print(json.dumps(dict(meta, ceiling_copy_TBps=copy_tbps)))
    rows = []
    D = 128
    print(f"{'case':24s} {'attnkit ms':>10s} {'FLA ms':>8s} {'attnkit TB/s':>12s} {'FLA TB/s':>9s} {'% copy':>7s} {'speedup':>8s}  "
          f"rel err vs FLA | layers: attnkit / FLA ms, % copy, speedup")
    for B, H in ((1, 32), (16, 32), (64, 32), (256, 32)):
        torch.manual_seed(0)
        q = F.normalize(torch.randn(B, 1, H, D, device=dev, dtype=torch.bfloat16), dim=-1)
        k = F.normalize(torch.randn(B, 1, H, D, device=dev, dtype=torch.bfloat16), dim=-1)
        v = torch.randn(B, 1, H, D, device=dev, dtype=torch.bfloat16)
        g = F.logsigmoid(torch.randn(B, 1, H, device=dev, dtype=torch.float32))
        beta = torch.rand(B, 1, H, device=dev, dtype=torch.bfloat16).sigmoid()
        h0 = torch.randn(B, H, D, D, device=dev, dtype=torch.float32)
        state = h0.clone()
        out = torch.empty_like(v)
        def step(s):  # one decode call updating state s, on the current stream (a graph's while capturing)
            if fn(q.data_ptr(), k.data_ptr(), v.data_ptr(), g.data_ptr(), beta.data_ptr(), s.data_ptr(), out.data_ptr(),
                  B, 1, H, H, D, 0, 0, torch.cuda.current_stream().cuda_stream, err, 512) != 0:
                raise RuntimeError(err.value.decode())
        run = lambda: step(state)
        run()
        ms = do_bench(run, warmup=25, rep=200, return_mode="median")
        fla_ms, rel = float("nan"), float("nan")
        try:
            # keywords: in fla 0.6 the 5th positional parameter is the per-key gate gk, not beta
            fla = lambda: fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0, output_final_state=True)
            with torch.no_grad():
                o_ref, _ = fla()
                fla_ms = do_bench(fla, warmup=25, rep=200, return_mode="median")
            state.copy_(h0)
            run()
            rel = ((out.float() - o_ref.float()).pow(2).mean().sqrt() / o_ref.float().pow(2).mean().sqrt()).item()
        except Exception as e:  # FLA's kernel has failed at large batch on this device before
            print("FLA failed:", str(e)[:200])
        # The serving view: LAYERS calls on LAYERS states in one graph.
        states = [h0.clone() for _ in range(LAYERS)]
        lay_ms = layers_ms(lambda i: step(states[i]))
        del states
        h0s = [h0.clone() for _ in range(LAYERS)]
        with torch.no_grad():
            fla_lay_ms = layers_ms(lambda i: fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=h0s[i],
                                                                              output_final_state=True))
        del h0s
        state_bytes = 2 * B * H * D * D * 4
        tbps = state_bytes / ms / 1e9
        row = dict(meta, op="gdn_decode", B=B, H=H, D=D, T=1, ms=ms, fla_ms=fla_ms, state_TBps=tbps,
                   fla_state_TBps=state_bytes / fla_ms / 1e9, pct_of_copy=100 * tbps / copy_tbps, speedup_vs_fla=fla_ms / ms,
                   rel_rms_vs_fla=rel, ceiling_copy_TBps=copy_tbps, layers=LAYERS, layers_ms=lay_ms, fla_layers_ms=fla_lay_ms,
                   layers_pct_of_copy=100 * state_bytes / lay_ms / 1e9 / copy_tbps, layers_speedup_vs_fla=fla_lay_ms / lay_ms)
        rows.append(row)
        print(f"B{B} H{H} D{D} T1{'':12s} {ms:10.4f} {fla_ms:8.4f} {tbps:12.2f} {row['fla_state_TBps']:9.2f} "
              f"{row['pct_of_copy']:6.1f}% {row['speedup_vs_fla']:7.2f}x  {rel:.2e} | {lay_ms:.4f} / {fla_lay_ms:.4f} ms, "
              f"{row['layers_pct_of_copy']:5.1f}%, {row['layers_speedup_vs_fla']:.2f}x", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_gdn_decode.jsonl"), "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
