"""bench/ncu_sass_lines.py — where one kernel's time goes, by source line, from an ncu SASS table.

On the device (the program built with -lineinfo, e.g. PROBE_NVCC_FLAGS=-lineinfo):
    ncu --clock-control none --set full -k regex:KERNEL -s 2 -c 1 -o $OUT/r PROGRAM ARGS
    ncu -i $OUT/r.ncu-rep --page source --csv --print-source sass > $OUT/r.csv
Here (the same binary; nvdisasm, cuobjdump from the CUDA toolkit or a pip install):
    python3 bench/ncu_sass_lines.py r.csv PROGRAM KERNEL_REGEX [--top N]
      (KERNEL_REGEX picks the instantiation among the mangled names, e.g. wu_kernel.*bfloat16_tELi128)

ncu's table has one row per SASS instruction in address order with its executed-instruction count
and stall samples, but no source lines (unless ncu saw the source); nvdisasm -g on the same cubin
gives each instruction's file:line. The two listings are matched by position and checked by
opcode. Prints the top source lines and the per-file totals of samples and warp-instructions, and
the stall reasons of the top lines. Without the binary here: export with --print-source cuda,sass
and read it with bench/ncu_source.py."""
import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict


def tool(name):
    for d in (os.environ.get("CUDA_BIN", ""), "/usr/local/cuda/bin", "/tmp/cutools/nvidia/cu13/bin"):
        p = os.path.join(d, name)
        if d and os.path.exists(p):
            return p
    p = shutil.which(name)
    if not p:
        sys.exit(f"{name} not found: set CUDA_BIN")
    return p


def sass_with_lines(program, kernel):
    """[(opcode, 'file:line')] of the first function whose mangled name matches the regex `kernel`, in address order."""
    tmp = tempfile.mkdtemp()
    subprocess.run([tool("cuobjdump"), "-xelf", "all", os.path.abspath(program)], cwd=tmp, check=True,
                   stdout=subprocess.DEVNULL)
    for cubin in sorted(os.listdir(tmp)):
        text = subprocess.run([tool("nvdisasm"), "-g", "-c", os.path.join(tmp, cubin)], capture_output=True,
                              text=True).stdout
        out, inside, where = [], False, "?"
        for line in text.splitlines():
            m = re.match(r"\s*\.text\.(\S+):", line)
            if m:
                if inside:
                    break
                inside = re.search(kernel, m.group(1)) is not None
                continue
            if not inside:
                continue
            m = re.search(r'//## File "([^"]+)", line (\d+)', line)
            if m:
                where = f"{os.path.basename(m.group(1))}:{m.group(2)}"
                continue
            m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
            if m:
                out.append((m.group(1), where))
        if out:
            return out
    sys.exit(f"no function matching {kernel!r} in {program}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("program")
    ap.add_argument("kernel")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv)))
    head = next(i for i, r in enumerate(rows) if any("Source" == c or "Address" == c for c in r))
    cols = rows[head]
    body = [r for r in rows[head + 1:] if len(r) == len(cols)]

    def col(*names):
        for n in names:
            if n in cols:
                return cols.index(n)
        return None

    c_src = col("Source")
    c_samples = col("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All Cycles)")
    c_inst = col("Instructions Executed", "Warp Instructions Executed")
    if None in (c_src, c_samples, c_inst):
        sys.exit(f"columns not found; header: {cols}")
    stall_cols = [i for i, n in enumerate(cols) if n.startswith("stall_") or n.endswith("(stall)")]
    sass = sass_with_lines(args.program, args.kernel)
    if len(sass) != len(body):
        print(f"warning: {len(body)} rows in the table, {len(sass)} instructions in the binary", file=sys.stderr)

    def num(s):
        try:
            return float(s.replace(",", ""))
        except ValueError:
            return 0.0

    by_line = defaultdict(lambda: [0.0, 0.0, defaultdict(float)])
    by_file = defaultdict(lambda: [0.0, 0.0])
    mismatches = 0
    for r, (op, where) in zip(body, sass):
        if not re.sub(r"^@!?U?P\w+\s+", "", r[c_src].strip()).startswith(op.split(".")[0]):  # ncu prints the predicate
            mismatches += 1
        e = by_line[where]
        e[0] += num(r[c_samples])
        e[1] += num(r[c_inst])
        for i in stall_cols:
            e[2][cols[i]] += num(r[i])
        f = by_file[where.split(":")[0]]
        f[0] += num(r[c_samples])
        f[1] += num(r[c_inst])
    if mismatches:
        print(f"warning: {mismatches} opcodes differ between the table and the binary", file=sys.stderr)
    total_s = sum(e[0] for e in by_line.values()) or 1
    total_i = sum(e[1] for e in by_line.values()) or 1
    print(f"total samples {total_s:.0f}, warp-instructions {total_i:.0f}")
    print("\nper file: samples% instructions%")
    for f, (s, i) in sorted(by_file.items(), key=lambda x: -x[1][0]):
        print(f"  {f:40s} {100 * s / total_s:6.1f} {100 * i / total_i:6.1f}")
    print(f"\ntop {args.top} lines: samples% instructions% [top stall reasons]")
    for where, (s, i, st) in sorted(by_line.items(), key=lambda x: -x[1][0])[:args.top]:
        reasons = ", ".join(f"{k.replace('stall_', '')} {100 * v / max(s, 1):.0f}%"
                            for k, v in sorted(st.items(), key=lambda x: -x[1])[:3] if v)
        print(f"  {where:40s} {100 * s / total_s:6.1f} {100 * i / total_i:6.1f}  {reasons}")


if __name__ == "__main__":
    main()
