"""bench/profile_gdn_decode.py — one attnkit decode launch (B sequences x 32 heads, D 128, T 1) for ncu."""
import ctypes, sys

import torch
import torch.nn.functional as F

lib = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else "build-device/tools/libattnkit_c.so")
fn = lib.attnkit_c_gdn_decode
P, I64, I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
fn.argtypes = [P] * 7 + [I64] * 5 + [I, I, P, ctypes.c_char_p, I]
B, H, D = 64, 32, 128
q = F.normalize(torch.randn(B, 1, H, D, device="cuda", dtype=torch.bfloat16), dim=-1)
k, v = q.clone(), torch.randn_like(q)
g = torch.zeros(B, 1, H, device="cuda")
beta = torch.full((B, 1, H), 0.5, device="cuda", dtype=torch.bfloat16)
state = torch.randn(B, H, D, D, device="cuda")
out = torch.empty_like(v)
err = ctypes.create_string_buffer(256)
for _ in range(3):
    assert fn(q.data_ptr(), k.data_ptr(), v.data_ptr(), g.data_ptr(), beta.data_ptr(), state.data_ptr(), out.data_ptr(),
              B, 1, H, H, D, 0, 0, None, err, 256) == 0, err.value
torch.cuda.synchronize()
