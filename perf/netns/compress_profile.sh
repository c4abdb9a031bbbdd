#!/bin/bash
# perf/netns/compress_profile.sh — where one rank's CPU goes in a compressed 64 MiB float32
# allreduce on 2 namespace hosts x R ranks at 2 Gbit/s, beside the model's account of it.
#
#   compress_profile.sh BIN_DIR CODEC [R=2] [CALLS=30] [OUT_DIR=/tmp/compress_profile]
#
# (1) calibrates the job's fabric (weft-topo --calibrate) into OUT_DIR/2xR.topo, (2) runs
# weft-perf --compress CODEC with rank 0 under `perf record` (4000 Hz), (3) prints the model's
# CPU per rank by kind of work (weft-topo --explain: "cores busy ... per rank: ...") and the
# measured one: rank 0's samples in the longest stretch of timed calls (50 ms bins free of the
# harness's own work and of first-use costs: page faults, the huge-page fold), per call at
# the measured call time, sorted into the same kinds by symbol. "other" is what the model has
# no kind for (scheduling, system calls, the executor's bookkeeping). Calibrate and measure in
# the same minute: the VM's memory bandwidth moves by up to 2x between phases of tens of
# seconds. Needs root (perf/netns/run.sh) and perf (linux-perf).
set -eu
[ $# -ge 2 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
B="$1" C="$2" R="${3:-2}" N="${4:-30}" OUT="${5:-/tmp/compress_profile}"
command -v perf > /dev/null || { echo "compress_profile.sh: perf not found (apt-get install linux-perf)" >&2; exit 2; }
HERE="$(cd "$(dirname "$0")" && pwd)"
NS=(bash "$HERE/run.sh" --hosts 2 --ranks-per-host "$R" --rate 2gbit --timeout 300 --)
mkdir -p "$OUT"
WRAP="$OUT/record_rank0.sh"
printf '#!/bin/bash\n[ "$WEFT_RANK" = 0 ] || exec "$@"\nexec perf record -q -F 4000 -o %s -- "$@"\n' "$OUT/rank0.data" > "$WRAP"
chmod +x "$WRAP"
"${NS[@]}" "$B/weft-topo" --calibrate --save "$OUT/2x$R.topo" > "$OUT/calibration.txt" 2>&1
t=$("${NS[@]}" "$WRAP" "$B/weft-perf" -C allreduce -b 64M -e 64M -n "$N" -w 2 --compress "$C" 2>&1 |
    grep -E '^\[0\] +67108864' | awk '{print $7}')
echo "# $(date -u +%FT%TZ) 2x$R $C: call ${t:-?} us (rank 0, out of place)"
echo -n "model:    "
"$B/weft-topo" --topo-file "$OUT/2x$R.topo" --explain allreduce 64M --compress "$C" 2>&1 |
  grep -o 'cores busy .*per rank[^)]*' | head -1
perf script -i "$OUT/rank0.data" -F time,ip,sym 2> /dev/null | python3 -c '
import collections, re, sys
call_us = float(sys.argv[1])
# First-use and harness work: outside the steady state the model describes.
setup = re.compile(r"perf_|copy_mc_enhanced|clear_page|collapse|exc_page_fault|do_anonymous_page")
# Top-k decodes zero-fill the output (memset); its encode selects (KthLargest, nth_element
# over the sample and over the candidates, named std::__introselect, and the comparator,
# named ">"). A CMA read checks its right to the peer (ptrace_access, find_get_task_by_vpid);
# softirq time on this harness is the veth and bridge receive path.
kinds = [("decodes", r"Decode|memset"), ("encodes", r"Encode|KthLargest|introselect|^>$"),
         ("copies and reductions", r"ReduceLoop|memmove|memcpy|StreamUnfenced"),
         ("receive copies", r"^_copy_to_iter|copy_page_to_iter|process_vm|unpin_user|get_user_pages|gup_|ptrace_access|ptrace_may_access|find_get_task_by_vpid"),
         ("network stack", r"tcp|_copy_from_iter|skb|sock|^ip_|^br_|dev_|net|nf_|softirq")]
samples = []
for line in sys.stdin:
    m = re.match(r"\s*([0-9.]+):\s+[0-9a-f]+\s+(.*)", line)
    if m: samples.append((float(m.group(1)), m.group(2).strip()))
if not samples: sys.exit("no samples")
BIN = 0.05
bins = collections.defaultdict(lambda: [0, 0])
for t, s in samples:
    b = bins[int(t / BIN)]; b[0] += 1; b[1] += bool(setup.search(s))
keys = sorted(bins); best = (0, 0, 0); start = None
for k in range(keys[0], keys[-1] + 2):
    clean = k in bins and bins[k][1] == 0
    if clean and start is None: start = k
    if not clean and start is not None:
        best = max(best, (k - start, start, k)); start = None
n, b0, b1 = best
lo, hi = (b0 + 1) * BIN, (b1 - 1) * BIN  # the edge bins may hold part of a setup
if hi - lo < 0.2: sys.exit("no stretch of timed calls of 0.2 s; run more calls")
per_call = 250.0 / ((hi - lo) * 1e6 / call_us)  # us per sample (4000 Hz) over the calls
acc = collections.Counter(); total = 0
for t, s in samples:
    if lo <= t < hi:
        total += 1
        acc[next((k for k, rx in kinds if re.search(rx, s)), "other")] += 1
print("measured: %.0f us per call (%.2f s, %.0f calls): " % (total * per_call, hi - lo, (hi - lo) * 1e6 / call_us) +
      ", ".join("%s %.0f" % (k, acc[k] * per_call) for k in [k for k, _ in kinds] + ["other"]))
' "${t:-30000}"
