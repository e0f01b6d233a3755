#!/usr/bin/env python3
"""bench/fwd_trace/timeline.py FILE CTA[,CTA...] — per tile, the stamps of make_variant.py's probe
in SM cycles from the CTA's first stamp (-1: not reached). A later launch overwrites an earlier one
only as far as it got, so tiles past a CTA's last one can be stale: read until the consumers' epilogue
stamps stop increasing."""
import sys

stamps = {}
for line in open(sys.argv[1]):
    if line.startswith("T "):
        f = line.split()
        stamps[tuple(map(int, f[1:4]))] = [int(x) for x in f[4:]]
for cta in map(int, sys.argv[2].split(",")):
    base = min(x for (c, r, j), v in stamps.items() if c == cta for x in v if x > 0)
    rel = lambda x: x - base if x > 0 else -1
    print(f"== CTA {cta}")
    for j in range(40):
        if all(x == 0 for x in stamps[(cta, 1, j)]):
            break
        p = stamps[(cta, 0, j)]
        print(f" tile {j:2d} producer: top {rel(p[0])} Q claimed {rel(p[1])} Q issued {rel(p[3])} "
              f"K acquired {[rel(x) for x in p[4:8]]} loads issued {rel(p[2])}")
        for w in (1, 2):
            v = stamps[(cta, w, j)]
            print(f"   wg{w - 1}: top {rel(v[0])} Q {rel(v[1])} S0 {rel(v[2])} softmax0 {rel(v[3])} "
                  f"turn {[rel(x) for x in v[9:12]]} S {[rel(x) for x in v[13:16]]} loop {rel(v[4])} "
                  f"last P.V {rel(v[5])} epilogue {rel(v[6])} | key tile 2: softmax {rel(v[16])} P.V {rel(v[17])} "
                  f"converted {rel(v[18])}, tile 3 K/V {rel(v[19])}")
