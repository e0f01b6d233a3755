"""bench/launch_order_model.py — how far past the mean the last CTA finishes, for a hand-out order of
tiles on persistent CTAs (or one-CTA-per-tile waves): a greedy list schedule over the SMs, each tile
costing its visited blocks plus a constant for its boundary (prologue, epilogue). A model, not a
measurement: it found the flex forward's document-mask tail (docs/perf/flex_fwd.md v17) and
predicted that fix within two points, but it knows nothing of L2 or DRAM (an order that spreads
many heads' long rows over one wave lost 5% on the causal row while the model saw no change).

    python3 bench/launch_order_model.py [--sms 132] [--heads 16] [--seq 16384] [--overhead 1.5]

Rows: the bench_flex.py masks at B1 (sliding window 1024, eight documents of random length,
causal) under plain order (head by head, each head's query tiles last first), all heads
interleaved, and the short tail (plain order, then each sequence's last two waves across heads).
"""
import argparse
import heapq
import random


def makespan_over_mean(works, sms, overhead):
    """The last SM's finish over the mean load when tiles are taken in order by the first free SM."""
    finish = [0.0] * sms
    for w in works:
        heapq.heappush(finish, heapq.heappop(finish) + w + overhead)
    return max(finish) / ((sum(works) + overhead * len(works)) / sms)


def rows_sliding(m_blocks, window_blocks):
    return [min(m + 1, window_blocks + 1) for m in range(m_blocks)]


def rows_documents(m_blocks, block, docs, seed=0):
    """Visited key blocks per query block under causal + documents (sorted random ids, as the bench)."""
    rng = random.Random(seed)
    ids = sorted(rng.randrange(docs) for _ in range(m_blocks * block))
    lo = [min(ids[i * block:(i + 1) * block]) for i in range(m_blocks)]
    hi = [max(ids[i * block:(i + 1) * block]) for i in range(m_blocks)]
    return [sum(1 for j in range(i + 1) if hi[j] >= lo[i] and lo[j] <= hi[i]) for i in range(m_blocks)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=16384)
    ap.add_argument("--overhead", type=float, default=1.5, help="a tile's boundary cost, in visited blocks")
    args = ap.parse_args()
    m_blocks, heads = args.seq // 128, args.heads
    tail = min(m_blocks, -(-2 * args.sms // heads))  # launch_order.hpp short_tail_m_blocks
    masks = {"sliding1024": rows_sliding(m_blocks, 1024 // 128),
             "documents": rows_documents(m_blocks, 128, 8),
             "causal": [m + 1 for m in range(m_blocks)]}
    print(f"{'mask':12} {'plain':>7} {'all heads':>10} {'short tail':>11}")
    for name, rows in masks.items():
        plain = [rows[m] for h in range(heads) for m in reversed(range(m_blocks))]
        interleaved = [rows[m] for m in reversed(range(m_blocks)) for h in range(heads)]
        short_tail = ([rows[m] for h in range(heads) for m in reversed(range(tail, m_blocks))] +
                      [rows[m] for m in reversed(range(tail)) for h in range(heads)])
        r = [makespan_over_mean(o, args.sms, args.overhead) for o in (plain, interleaved, short_tail)]
        print(f"{name:12} {r[0]:7.3f} {r[1]:10.3f} {r[2]:11.3f}")


if __name__ == "__main__":
    main()
