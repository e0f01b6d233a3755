"""bench/ncu_sass_diff.py — where one kernel spends more in case B than in case A, instruction by
instruction, from two ncu SASS tables of the same binary (say B4 against the varlen batch).

On the device, for each case:
    ncu --clock-control none --set full -k regex:KERNEL -c 1 -o $OUT/a PROGRAM ARGS_A
    ncu -i $OUT/a.ncu-rep --page source --csv --print-source sass | gzip > $OUT/a.csv.gz
Here:
    python3 bench/ncu_sass_diff.py a.csv.gz b.csv.gz [--top N] [--kernel I]

The tables list the kernel's SASS in address order, so rows match by index (the load addresses
differ between processes; the instructions do not). Prints the total stall samples and executed
warp-instructions of each case, then the rows whose samples grow most from A to B with their
SASS, samples, executions and B's top stall reasons. A table holding several kernels (ncu -c N)
is split at its "Kernel Name" rows; --kernel picks one (default 0). For source lines, give the
rows' neighbourhood to bench/ncu_sass_lines.py (which maps SASS rows to file:line).
"""
import argparse
import csv
import gzip


def kernels(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    out, cur = [], None
    for r in rows:
        if r and r[0] == "Kernel Name":
            cur = {"name": r[1], "rows": []}
            out.append(cur)
        elif r and r[0] == "Address" and cur is not None:
            cur["header"] = r
        elif cur is not None and "header" in cur:
            cur["rows"].append(r)
    return out


def table(kernel):
    h = kernel["header"]
    i_src, i_s, i_e = h.index("Source"), h.index("Warp Stall Sampling (All Samples)"), h.index("Instructions Executed")
    stalls = [(c[len("stall_"):], h.index(c)) for c in h if c.startswith("stall_") and "Not Issued" not in c]
    num = lambda x: float(x or 0)
    return [(r[i_src], num(r[i_s]), num(r[i_e]), {n: num(r[j]) for n, j in stalls}) for r in kernel["rows"] if len(r) > i_e]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--kernel", type=int, default=0)
    args = ap.parse_args()
    ka, kb = kernels(args.a)[args.kernel], kernels(args.b)[args.kernel]
    if ka["name"] != kb["name"]:
        raise SystemExit(f"different kernels: {ka['name'][:80]} / {kb['name'][:80]}")
    a, b = table(ka), table(kb)
    if len(a) != len(b):
        raise SystemExit(f"different SASS lengths ({len(a)} / {len(b)}): not the same binary")
    print(ka["name"][:160])
    print(f"samples {sum(x[1] for x in a):.0f} -> {sum(x[1] for x in b):.0f}; "
          f"warp-instructions {sum(x[2] for x in a):.0f} -> {sum(x[2] for x in b):.0f}")
    print(f"{'row':>5} {'samples A':>9} {'B':>7} {'B - A':>7} {'exec A':>9} {'exec B':>9}  SASS  [B's top stalls]")
    for i in sorted(range(len(a)), key=lambda i: a[i][1] - b[i][1])[: args.top]:
        top = sorted(b[i][3].items(), key=lambda kv: -kv[1])[:2]
        print(f"{i:5d} {a[i][1]:9.0f} {b[i][1]:7.0f} {b[i][1] - a[i][1]:+7.0f} {a[i][2]:9.0f} {b[i][2]:9.0f}  "
              f"{b[i][0].strip()[:60]}  {[(n, int(v)) for n, v in top]}")


if __name__ == "__main__":
    main()
