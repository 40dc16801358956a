#!/usr/bin/env python3
"""Min, median, p90, p95, p99 and max of the failover times in failover-times.txt."""
import re, statistics, sys
from pathlib import Path
path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "failover-times.txt")
v = sorted(int(m.group(1)) for m in re.finditer(r"first put and get (\d+) ms", path.read_text()))
at = lambda q: v[min(len(v) - 1, int(q * len(v)) - 1)]
print(f"{len(v)} runs: min {v[0]} ms, median {statistics.median(v):.0f}, p90 {at(0.90)}, "
      f"p95 {at(0.95)}, p99 {at(0.99)}, max {v[-1]}")
