#!/usr/bin/env python3
"""bench/ncu_sass_buckets.py — a kernel's SASS grouped by how many times each instruction ran, with
the stall samples and the instructions executed of each group: per-CTA code, per-tile code and each
branch of a tile's loop fall into groups of their own (the count is a multiple of CTAs x warps x
visits), so a costly path shows up without a -lineinfo build or a source map.

Export on the device (a report from `ncu --set full --import-source no -k regex:KERNEL -s 1 -c 1
-o REPORT PROGRAM ...`):
  ncu -i REPORT.ncu-rep --page source --csv --print-source sass | gzip > X.csv.gz

Then, here:
  ncu_sass_buckets.py X.csv.gz [Y.csv.gz ...]   the 14 groups with most samples, per file

How it found the attention backward's masked-tile cost (docs/perf/attention_bwd.md, fifty-ninth
session): in the D64 S512 causal launch the group run 49,152 times (= 4,096 CTAs x 3 masked
warpgroup tiles x 4 warps) held 25% of the instructions and 20% of the samples, while the
unmasked tiles' group (114,688 runs) held 89 instructions a warp.
"""
import collections
import csv
import gzip
import sys


def load(path):
    rows = list(csv.reader(gzip.open(path, "rt")))
    hdr = rows[1]  # row 0 names the kernel
    i_src, i_samp, i_exec = (hdr.index(c) for c in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"))
    return [(r[i_src].strip(), int(r[i_samp] or 0), int(r[i_exec] or 0)) for r in rows[2:] if len(r) > i_exec]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        samples, executed, count = collections.Counter(), collections.Counter(), collections.Counter()
        for _, s, n in load(path):
            samples[n] += s
            executed[n] += n
            count[n] += 1
        total = sum(samples.values())
        print(f"{path}: {total} samples, {sum(executed.values())} instructions executed")
        for n, s in samples.most_common(14):
            print(f"   run {n:9d} times: {count[n]:5d} instructions, samples {s:6d} ({100 * s / max(total, 1):4.1f}%),"
                  f" executed {executed[n]}")


if __name__ == "__main__":
    main()
