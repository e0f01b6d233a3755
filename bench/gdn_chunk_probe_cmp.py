"""bench/gdn_chunk_probe_cmp.py — compares the outputs two builds of bench/gdn_chunk_probe.cu dumped
(`gdn_chunk_probe check PREFIX` in each): RMS(a - b) / RMS(b) of o and of the final state per case.

    python3 bench/gdn_chunk_probe_cmp.py PREFIX_A PREFIX_B [cases] [fp16_cases]

cases: by default every case both builds dumped (an older probe has fewer); fp16_cases: the
probe's fp16 cases (1, 4, 6), whose o is read as float16.
"""
import os
import sys

import numpy as np


def load(path, ext, fp16):
    x = np.fromfile(path + ext, dtype=np.uint16 if ext == ".o" else np.float32)
    if ext == ".o":
        x = x.view(np.float16).astype(np.float32) if fp16 else (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float64)


def main():
    a, b = sys.argv[1], sys.argv[2]
    both = 0
    while os.path.exists(f"{a}.{both}.o") and os.path.exists(f"{b}.{both}.o"):
        both += 1
    cases = int(sys.argv[3]) if len(sys.argv) > 3 else both
    fp16 = {int(i) for i in sys.argv[4].split(",")} if len(sys.argv) > 4 else {1, 4, 6}
    worst = 0.0
    for i in range(cases):
        for ext in (".o", ".ht"):
            x, y = load(f"{a}.{i}", ext, i in fp16), load(f"{b}.{i}", ext, i in fp16)
            rel = np.sqrt(np.mean((x - y) ** 2) / max(np.mean(y ** 2), 1e-30))
            finite = bool(np.isfinite(x).all() and np.isfinite(y).all())
            worst = max(worst, rel if finite else np.inf)
            print(f"case {i} {ext:3s} n={x.size:8d} finite={finite} rel_rms={rel:.3e} max_abs={np.abs(x - y).max():.3e}")
    print(f"worst rel_rms {worst:.3e}")


if __name__ == "__main__":
    main()
