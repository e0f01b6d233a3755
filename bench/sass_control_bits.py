"""bench/sass_control_bits.py — the scheduling fields of a kernel's SASS (stall count, yield, the write
and read scoreboards an instruction sets, the scoreboards it waits on), and where the scoreboard set
by an instruction is first waited for. Reads `cuobjdump -sass` output (which prints each 128-bit
instruction as two 64-bit words; the fields are bits 41-63 of the second), e.g.

    cuobjdump -sass PROGRAM > k.sass
    python3 bench/sass_control_bits.py k.sass 'attention_bwd_kernel.*Li128E.*DenseBwd' --after 'REDG.E.ADD.F32x4'
    python3 bench/sass_control_bits.py k.sass KERNEL_REGEX --after 'REDG' --at 0xe520
    python3 bench/sass_control_bits.py k.sass KERNEL_REGEX --range 0x1600 0x1770

--after follows the code from the last instruction matching the pattern (unconditional branches
and backward conditional ones taken, i.e. around a loop) to the first instruction that waits on its
read or write scoreboard: the point where the warp stalls until that instruction has read its
registers (a store's data or address) or written its result. Layout of the fields as on sm_70 to
sm_90 (reverse-engineered, not documented by NVIDIA: treat as a guide)."""
import argparse
import re
import sys


def functions(text):
    for m in re.finditer(r"Function : (\S+)\n(.*?)(?=\n\s+Function :|\Z)", text, re.S):
        lines = m.group(2).splitlines()
        out = []
        for i, line in enumerate(lines):
            mm = re.match(r"\s+/\*([0-9a-f]{4,6})\*/\s+(.*?)\s*;\s+/\* (0x[0-9a-f]+) \*/", line)
            if mm and i + 1 < len(lines):
                hi = re.search(r"/\* (0x[0-9a-f]+) \*/", lines[i + 1])
                if hi:
                    out.append((int(mm.group(1), 16), mm.group(2), int(hi.group(1), 16)))
        yield m.group(1), out


def fields(hi):
    c = hi >> 41
    return {"stall": c & 0xF, "yield": (c >> 4) & 1, "write_sb": (c >> 5) & 7, "read_sb": (c >> 8) & 7,
            "wait": (c >> 11) & 0x3F}


def describe(addr, ins, hi):
    f = fields(hi)
    sb = lambda v: "-" if v == 7 else str(v)
    waits = ",".join(str(b) for b in range(6) if f["wait"] >> b & 1) or "-"
    return (f"{addr:#07x}  stall {f['stall']:2d} y{f['yield']}  sets w{sb(f['write_sb'])} r{sb(f['read_sb'])}  "
            f"waits {waits:7s} {ins}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sass")
    ap.add_argument("kernel", help="regex on the mangled name")
    ap.add_argument("--after", help="regex of an instruction: where its scoreboard is first waited for")
    ap.add_argument("--at", help="with --after: start from the matching instruction at this address, not the last one")
    ap.add_argument("--range", nargs=2, help="print the instructions between two addresses")
    args = ap.parse_args()
    found = False
    for name, ins in functions(open(args.sass).read()):
        if not re.search(args.kernel, name):
            continue
        found = True
        print(f"{name}: {len(ins)} instructions")
        if args.range:
            lo, hi_addr = (int(x, 0) for x in args.range)
            for a, s, hi in ins:
                if lo <= a <= hi_addr:
                    print(describe(a, s, hi))
        if args.after:
            hits = [k for k, (a, s, hi) in enumerate(ins)
                    if re.search(args.after, s) and (args.at is None or a == int(args.at, 0))]
            if not hits:
                print(f"no instruction matches {args.after!r}")
                continue
            a0, s0, hi0 = ins[hits[-1]]
            f0 = fields(hi0)
            sbs = {f0["read_sb"], f0["write_sb"]} - {7}
            print("from:", describe(a0, s0, hi0))
            index = {a: k for k, (a, s, hi) in enumerate(ins)}
            k, steps = hits[-1] + 1, 0
            while k < len(ins) and steps < 5000:
                a, s, hi = ins[k]
                if any(fields(hi)["wait"] >> b & 1 for b in sbs):
                    print(f"first wait, {steps} instructions on:", describe(a, s, hi))
                    break
                br = re.match(r"(@!?U?P\w+ )?BRA (0x[0-9a-f]+)", s)
                if br and (br.group(1) is None or int(br.group(2), 16) < a):
                    k = index[int(br.group(2), 16)]
                else:
                    k += 1
                steps += 1
            else:
                print("no wait found")
        print()
    if not found:
        sys.exit(f"no function matches {args.kernel!r}")


if __name__ == "__main__":
    main()
