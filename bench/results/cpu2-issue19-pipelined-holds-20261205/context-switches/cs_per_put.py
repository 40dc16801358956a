"""Context switches per put in each timed run of data.log: `perf stat -a -e
context-switches,task-clock -I 250 -x,` (perf-cs.csv, started with ha_cost.sh) summed over
the run's last 3 s but 0.25 s before its bench line (each line stamped in seconds since the
start), divided by the run's calls in that span."""
import re
import sys

here = sys.argv[1] if len(sys.argv) > 1 else "."
cs = []
for line in open(f"{here}/perf-cs.csv"):
    f = line.strip().split(",")
    if len(f) > 3 and f[3] == "context-switches":
        cs.append((float(f[0]), float(f[1])))
mode = None
for line in open(f"{here}/data.log"):
    m = re.search(r"enable_ha (\w+)", line)
    if m:
        mode = m.group(1)
    m = re.match(r"([\d.]+) bench: single  put .* (\d+) calls", line)
    if m:
        end, calls = float(m.group(1)), int(m.group(2))
        n = sum(v for t, v in cs if end - 3.0 < t <= end - 0.25)
        print(f"{mode}: {n / 2.75:.0f} context switches/s, {n / (calls * 2.75 / 3):.2f} per put")
