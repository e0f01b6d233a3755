"""bench/gdn_chunk_bwd_probe_cmp.py — compares the gradients (and the forward's final state) two builds of
bench/gdn_chunk_bwd_probe.cu dumped (`gdn_chunk_bwd_probe check PREFIX` in each, float32 files
PREFIX.<case>.<name>): RMS(a - b) / RMS(b), the largest difference, and whether the bits agree.

    python3 bench/gdn_chunk_bwd_probe_cmp.py PREFIX_A PREFIX_B
"""
import glob
import os
import sys

import numpy as np

NAMES = ("dq", "dk", "dv", "dbeta", "dg", "dh0", "ht")


def main():
    a, b = sys.argv[1], sys.argv[2]
    cases = sorted({int(p[len(b) + 1:].split(".")[0]) for p in glob.glob(f"{b}.*.dq")})
    if not cases:
        sys.exit(f"no dumps at {b}.*")
    worst = 0.0
    for i in cases:
        for name in NAMES:
            pa, pb = f"{a}.{i}.{name}", f"{b}.{i}.{name}"
            if not os.path.exists(pa):
                sys.exit(f"missing {pa}")
            x, y = np.fromfile(pa, np.float32).astype(np.float64), np.fromfile(pb, np.float32).astype(np.float64)
            finite = bool(np.isfinite(x).all() and np.isfinite(y).all())
            rel = np.sqrt(np.mean((x - y) ** 2) / max(np.mean(y ** 2), 1e-30)) if finite else np.inf
            worst = max(worst, rel)
            same = np.array_equal(x, y)
            print(f"case {i:2d} {name:5s} n={x.size:9d} finite={finite} bitwise={same} rel_rms={rel:.3e} "
                  f"max_abs={np.abs(x - y).max() if finite else np.inf:.3e}")
    print(f"worst rel_rms {worst:.3e}")


if __name__ == "__main__":
    main()
