"""bench/sim_launch_order.py — how much a kernel's tile order costs in its last waves, by simulation.

Greedy list scheduling, as the hardware does with a grid (and the forward's tile counter): each tile
goes, in launch order, to the SM that frees first. Durations are in units of one (query tile, key
tile) pair plus a constant per tile. Prints the makespan over the ideal (total work / SMs) for the
plain head-major order, grouped order (launch_order.hpp) and a few others, at the benchmark shapes
(B*S = 16k) and for the flex documents mask. No GPU needed; the numbers guided the grouped launch
order (docs/perf/attention_bwd.md, "Heads in groups").
    python3 bench/sim_launch_order.py
"""
import bisect
import heapq
import random

SMS = 132


def makespan(durations, slots=SMS):
    free = [0.0] * slots
    end = 0.0
    for d in durations:
        t = heapq.heappop(free)
        heapq.heappush(free, t + d)
        end = max(end, t + d)
    return end


def ratio(durations):
    return makespan(durations) / (sum(durations) / SMS)


def grouped(work, heads, sequences, g):
    """Heads taken g at a time, tile by tile across the group (work: per tile index, in launch order)."""
    return [w for _ in range(sequences) for _ in range(0, heads, g) for w in work for _ in range(g)]


def group_size(tiles, heads):
    g = 1
    while 2 * g * tiles <= SMS and heads % (2 * g) == 0:
        g *= 2
    return g


def causal_shapes():
    print("causal, B*S = 16k: plain / grouped (G) over the ideal")
    for d, heads, bn in ((64, 32, 128), (128, 16, 128), (256, 8, 64)):
        for s in (512, 2048, 8192, 16384):
            b = 16384 // s
            tiles = s // bn
            bwd = [s // 64 - n * bn // 64 + 1 for n in range(tiles)]  # query tiles met by key tile n, +1
            fwd = [(m + 1) * 128 / (64 if d == 256 else 128) + 1 for m in reversed(range(s // 128))]
            gb, gf = group_size(tiles, heads), group_size(s // 128, heads)
            print(f"  D{d:<3} S{s:<5}  backward {ratio(grouped(bwd, heads, b, 1)):.3f} / {ratio(grouped(bwd, heads, b, gb)):.3f} (G{gb})"
                  f"   forward {ratio(grouped(fwd, heads, b, 1)):.3f} / {ratio(grouped(fwd, heads, b, gf)):.3f} (G{gf})")


def documents(seed, s=16384, heads=16, docs=8):
    """Flex backward, documents mask (docs near-equal, as bench_flex.py draws them), causal."""
    rng = random.Random(seed)
    ids = sorted(rng.randrange(docs) for _ in range(s))
    bounds = [0] + [bisect.bisect_left(ids, i) for i in range(1, docs)] + [s]

    def work(n):  # query tiles of 64 rows meeting key tile n (128 keys), +1
        met = set()
        for d in range(docs):
            lo, hi = max(n * 128, bounds[d]), min(n * 128 + 127, bounds[d + 1] - 1)
            if lo <= hi:
                met.update(range(lo // 64, (bounds[d + 1] - 1) // 64 + 1))
        return len(met) + 1

    w = [work(n) for n in range(s // 128)]
    plain = grouped(w, heads, 1, 1)
    print(f"  seed {seed}: plain {ratio(plain):.3f}, G8 {ratio(grouped(w, heads, 1, 8)):.3f}, all heads {ratio(grouped(w, heads, 1, heads)):.3f},"
          f" sorted within each head {ratio([x for _ in range(heads) for x in sorted(w, reverse=True)]):.3f},"
          f" sorted overall {ratio(sorted(plain, reverse=True)):.3f}")


if __name__ == "__main__":
    causal_shapes()
    print("flex backward, documents (8 near-equal, causal), S16k H16:")
    for seed in range(3):
        documents(seed)
