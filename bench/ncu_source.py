#!/usr/bin/env python3
"""bench/ncu_source.py — read ncu's source page (CSV) of a kernel: where its stall samples and its
hot instructions sit, per source line, and how two builds differ.

Export on the device (a report from `ncu --set full -o REPORT ...` of a -lineinfo build):
  ncu -i REPORT.ncu-rep --page source --csv --print-source cuda,sass | gzip > X_cs.csv.gz

Then, here (KERNEL: a substring of the kernel's name):
  ncu_source.py lines  X_cs.csv.gz KERNEL [N]        the N source lines with most stall samples
  ncu_source.py stalls KERNEL A_cs.csv.gz B_cs.csv.gz ...   samples by stall reason, side by side
  ncu_source.py diff   KERNEL A_cs.csv.gz B_cs.csv.gz [N]   lines whose samples moved most (by text)
  ncu_source.py hot    KERNEL MIN A_cs.csv.gz B_cs.csv.gz   SASS executed >= MIN times, by line
Beside bench/ncu_sass_lines.py (a `--print-source sass` table mapped to lines by nvdisasm on the
same binary, which must be here) and bench/ncu_sass_diff.py (one binary, two cases, instruction by
instruction): this reads the export that carries its own source lines, so no binary is needed, and
compares two *builds* of a kernel.
Source lines are keyed by file name and text, so that builds with shifted line numbers compare.
An inlined instruction counts under every line of its inline stack (its own, its callers'), so
per-line figures overlap; `stalls` counts each instruction once.
"""
import collections
import csv
import gzip
import sys


def rows(path, kernel):
    """(file, line text, row) for every SASS row of `kernel` under its source line; and the header."""
    fn = fp = hdr = key = None
    for r in csv.reader(gzip.open(path, "rt")):
        if not r:
            continue
        if r[0] == "File Path":
            fp = r[1].split("/")[-1]
        elif r[0] == "Function Name":
            fn = r[1]
        elif r[0] == "Line No":
            hdr = r
        elif hdr and kernel in (fn or ""):
            if r[0] != "":
                key = (fp, r[0], r[1].strip())
            elif r[2].startswith("0x"):
                yield key, r, hdr


def num(x):
    try:
        return float(x)
    except ValueError:
        return 0.0


def per_line(path, kernel):
    out = collections.defaultdict(collections.Counter)
    for key, r, hdr in rows(path, kernel):
        c = out[key]
        c["samples"] += num(r[4])
        c["inst"] += num(r[7])
        for i, name in enumerate(hdr):
            if name.startswith("stall_") and "(Not Issued)" not in name:
                c[name] += num(r[i])
    return out


def by_text(path, kernel):
    out = collections.Counter()
    for (f, _, text), c in per_line(path, kernel).items():
        out[(f, text[:60])] += c["samples"]
    return out


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "lines":
        lines = per_line(argv[2], argv[3])
        total = sum(c["samples"] for c in lines.values()) or 1
        for (f, n, text), c in sorted(lines.items(), key=lambda kv: -kv[1]["samples"])[: int(argv[4]) if len(argv) > 4 else 40]:
            top = sorted(((v, k[6:]) for k, v in c.items() if k.startswith("stall_")), reverse=True)[:3]
            print(f"{c['samples']:7.0f} {100 * c['samples'] / total:5.1f}% inst {c['inst']:11.0f} {f}:{n} {text[:50]:50s} "
                  + " ".join(f"{k}={v:.0f}" for v, k in top))
    elif mode == "stalls":
        tables = []
        for path in argv[3:]:
            t, seen = collections.Counter(), set()
            for _, r, hdr in rows(path, argv[2]):
                if r[2] in seen:  # an inlined instruction is listed under each line of its inline stack
                    continue
                seen.add(r[2])
                t["samples"] += num(r[4])
                t["inst"] += num(r[7])
                for i, name in enumerate(hdr):
                    if name.startswith("stall_") and "(Not Issued)" not in name:
                        t[name] += num(r[i])
            tables.append(t)
        for k in ["samples", "inst"] + sorted(k for k in tables[0] if k.startswith("stall_")):
            print(f"{k:24s}", " ".join(f"{t[k]:13.0f}" for t in tables))
    elif mode == "diff":
        a, b = by_text(argv[3], argv[2]), by_text(argv[4], argv[2])
        for k in sorted(set(a) | set(b), key=lambda k: -abs(b[k] - a[k]))[: int(argv[5]) if len(argv) > 5 else 30]:
            print(f"{a[k]:7.0f} {b[k]:7.0f} {b[k] - a[k]:+7.0f}  {k[0]}: {k[1]}")
    elif mode == "hot":
        least, counts = float(argv[3]), []
        for path in argv[4:6]:
            c, seen = collections.Counter(), set()
            for (f, _, text), r, _ in rows(path, argv[2]):
                if num(r[7]) >= least and (f, text, r[2]) not in seen:
                    seen.add((f, text, r[2]))
                    c[(f, text[:60])] += 1
            counts.append(c)
        a, b = counts
        print(f"hot SASS: {sum(a.values())} -> {sum(b.values())}")
        for k in sorted(set(a) | set(b), key=lambda k: -abs(b[k] - a[k]))[:25]:
            print(f"{a[k]:5d} {b[k]:5d} {b[k] - a[k]:+5d} {k[0]}: {k[1]}")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:
        pass
