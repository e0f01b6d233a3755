"""bench/profile_attention_bwd.py — attnkit backward launches of one shape for ncu: the default path
then the deterministic one (kernel attention_bwd_kernel, launches 2 and 4 after one warm-up each).
usage: python3 bench/profile_attention_bwd.py LIB B H S D CAUSAL"""
import ctypes
import sys

import torch

sys.path.insert(0, "bench")
from bench_attention import Attnkit, load_lib  # noqa: E402
from bench_attention_bwd import load_bwd  # noqa: E402

lib_path, B, H, S, D, causal = sys.argv[1], *map(int, sys.argv[2:7])
ak, bwd = Attnkit(load_lib(lib_path)), load_bwd(lib_path)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
dout, out = torch.randn_like(q), torch.empty_like(q)
lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
ak.fwd(q, k, v, out, lse, causal, 1)
dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
err = ctypes.create_string_buffer(512)
for det in (0, 0, 1, 1):  # warm-up, profiled; warm-up, profiled
    rc = bwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), dout.data_ptr(), dq.data_ptr(),
             dk.data_ptr(), dv.data_ptr(), B, S, S, H, H, D, 0, 1, causal, 0, -1, -1, 0.0, 0.0, None, None, 0, 0, 0, 0, det,
             torch.cuda.current_stream().cuda_stream, err, 512)
    assert rc == 0, err.value
torch.cuda.synchronize()
