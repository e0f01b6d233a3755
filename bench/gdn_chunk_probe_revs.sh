#!/usr/bin/env bash
# bench/gdn_chunk_probe_revs.sh — build the forward probe (bench/gdn_chunk_probe.cu) or, with
# PROBE=bwd, the backward probe (bench/gdn_chunk_bwd_probe.cu) of several git revisions here, for
# one device call that checks and times them side by side:
#   [PROBE=bwd] bash bench/gdn_chunk_probe_revs.sh main wip/some-branch [...]   (the first is the baseline)
#   device run: command "bash .deps/probe-revs/run.sh", carry [".deps/probe-revs"]
# Each revision builds from a temporary worktree with this checkout's CuTe headers
# (gdn_chunk_probe.sh, CUTLASS_INC); "." stands for the working tree as it is. On the device,
# run.sh (written here) runs every build's `check` (errors against the float64 recurrence), compares
# each build's dumps with the baseline's (gdn_chunk_probe_cmp.py), times CASES (default: B4, B1
# H64, B1 H16, the varlen batch, B2 H64) alternating between builds, twice, and runs memcheck on
# every non-baseline build's check; each command under `timeout`, so a hang costs a minute.
# The backward's check dumps gradients (no float64 reference in the probe: the GPU tests hold that);
# its cmp gives each gradient's RMS difference from the baseline's, and its default CASES are the
# B4 T8192 H16 case rerun and kept, B1 T32768 H32 and B1 T8192 H64.
# Results: $OUT/{check_*,cmp_*,memcheck_*,time}.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 REV [REV ...] (the first is the baseline; . = the working tree)" >&2; exit 2; }
root=$PWD
probe=${PROBE:-fwd}
[ "$probe" = fwd ] || [ "$probe" = bwd ] || { echo "PROBE: expected fwd or bwd, got '$probe'" >&2; exit 2; }
program=$([ "$probe" = fwd ] && echo gdn_chunk_probe || echo gdn_chunk_bwd_probe)
cmp=$([ "$probe" = fwd ] && echo gdn_chunk_probe_cmp.py || echo gdn_chunk_bwd_probe_cmp.py)
out=.deps/probe-revs
rm -rf "$out"
mkdir -p "$out"
cutlass=$root/.deps/cutlass/cutlass_library/source/include
[ -f "$cutlass/cute/tensor.hpp" ] || python3 -m pip install -q --no-index --no-deps --target .deps/cutlass .whl/nvidia_cutlass-*.whl
names=()
for rev in "$@"; do
  name=$(echo "$rev" | tr -c 'A-Za-z0-9_.\n-' '_')
  [ "$rev" = . ] && name=worktree
  names+=("$name")
  if [ "$rev" = . ]; then
    src=$root
  else
    src=$(mktemp -d /tmp/probe-rev.XXXX)
    git worktree add -f --detach "$src" "$rev" -q
    cp "$root/bench/$program.cu" "$src/bench/"  # every build runs this checkout's probe: the same cases
  fi
  echo "== $rev -> $out/$name"
  # Every revision builds with this checkout's recipe (gdn_chunk_probe.sh: its unit list and
  # PROBE_JOBS) and probe program, in the revision's tree.
  PROBE_SRC="$src" PROBE="$probe" PROBE_ONLY_BUILD=1 CUTLASS_INC="$cutlass" PROBE_DIR="$root/$out/build-$name" \
    bash "$root/bench/gdn_chunk_probe.sh"
  mkdir -p "$out/$name"
  cp "$out/build-$name/$program" "$out/$name/probe"
  rm -rf "$out/build-$name"
  if [ "$rev" != . ]; then git worktree remove --force "$src"; fi
done
if [ "$probe" = fwd ]; then
  cases=${CASES:-"4 8192 16 50|1 8192 64 50|1 8192 16 50|varlen 20 8192 64 50|2 16384 64 20"}
else
  cases=${CASES:-"4 8192 16 20|4 8192 16 20 kept|1 32768 32 10|1 8192 64 20"}
fi
{
  echo '#!/usr/bin/env bash'
  echo "# written by bench/gdn_chunk_probe_revs.sh for: $*"
  echo 'set -u'
  echo 'R=.deps/probe-revs'
  echo "names=(${names[*]})"
  echo "cmp=$cmp"
  echo "IFS='|' read -ra cases <<< \"$cases\""
  cat <<'EOF'
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt"
for n in "${names[@]}"; do
  timeout 120 "$R/$n/probe" check "$OUT/d.$n" > "$OUT/check_$n.txt" 2>&1; echo "rc=$?" >> "$OUT/check_$n.txt"
done
for n in "${names[@]:1}"; do
  python3 "bench/$cmp" "$OUT/d.${names[0]}" "$OUT/d.$n" > "$OUT/cmp_$n.txt" 2>&1
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 "$R/$n/probe" check "$OUT/m.$n" > "$OUT/memcheck_$n.txt" 2>&1
  echo "rc=$?" >> "$OUT/memcheck_$n.txt"
done
for rep in 1 2; do
  for c in "${cases[@]}"; do
    for n in "${names[@]}"; do
      echo "$n $c: $(timeout 60 "$R/$n/probe" $c 2>&1 | tail -n 1)" >> "$OUT/time.txt"
    done
  done
done
rm -f "$OUT"/d.* "$OUT"/m.*
cat "$OUT/time.txt"
for f in "$OUT"/check_* "$OUT"/cmp_* "$OUT"/memcheck_*; do echo "== $f"; tail -n 3 "$f"; done
EOF
} > "$out/run.sh"
echo "wrote $out/run.sh ($(du -sh "$out" | cut -f1)); device run: command \"bash $out/run.sh\", carry [\"$out\"]"
